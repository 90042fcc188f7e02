#include <criterion/criterion.h>
#include "loom.h"
Test(smoke, create) { loom_kernel *k = loom_kernel_create("x", 4); cr_assert(k); loom_kernel_destroy(k); }
