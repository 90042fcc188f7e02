/* aot_user.c -- built by tests/install with loom_add_aot(... NAME gemm PREFIX g ...): the
 * generated g.h and g.c compile and link with dl and pthread alone (no libloom). */
#include <stdio.h>

#include "g.h"

int main(void)
{
    printf("aot_user: g.h and g.c built\n");
    return 0;
}
