// FUZZ_CHECK: the property checks of the fuzz targets. A failed check prints what broke and
// aborts, which libFuzzer reports as a crash and saves the input.
#pragma once

#include <cstdio>
#include <cstdlib>

#define FUZZ_CHECK(cond, what)                                                              \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "%s:%d: property violated: %s (%s)\n", __FILE__, __LINE__, what, \
                   #cond);                                                                  \
      std::abort();                                                                         \
    }                                                                                       \
  } while (false)
