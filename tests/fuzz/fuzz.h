/* SPDX-License-Identifier: Apache-2.0 */
/* Shared declarations of the libFuzzer targets (see README.md). */
#ifndef RK_FUZZ_H
#define RK_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/** libFuzzer entry point: one input. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif /* RK_FUZZ_H */
