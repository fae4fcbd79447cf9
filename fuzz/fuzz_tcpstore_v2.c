/* fuzz_tcpstore_v2.c - ts_parse() over a TCPStore byte stream in the
 * >= 2.2 numbering (VALIDATE=0 ... BARRIER=18).
 * The checks are in fuzz_tcpstore.h. */
#define FUZZ_TS_DIALECT TS_DIALECT_V2
#include "fuzz_tcpstore.h"
