/* fuzz_tcpstore_v1.c - ts_parse() over a TCPStore byte stream in the
 * PyTorch 1.13 numbering (SET=0 ... DELETE_KEY=8, no VALIDATE).
 * The checks are in fuzz_tcpstore.h. */
#define FUZZ_TS_DIALECT TS_DIALECT_V1
#include "fuzz_tcpstore.h"
