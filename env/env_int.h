/* env_int.h - env module internals. */
#ifndef ENV_INT_H
#define ENV_INT_H

#include <stddef.h>

/* The built-in profiles, generated at build time from env/profiles/NAME.env
 * (cmake/embed_profiles.cmake): NULL-terminated names, texts alike. */
extern const char *const env__builtin_names[];
extern const char *const env__builtin_texts[];

/* [A-Za-z_][A-Za-z0-9_]* of length n. */
int env__valid_key(const char *k, size_t n);
/* 1 when an NCCL_ALGO value asks for NVLS (and is not an exclusion). */
int env__algo_wants_nvls(const char *v);

#endif
