/* chainstep: one link of manylibs's chain, built into many distinct
 * libraries: calls the next link (steps[k + 1]), with work after the call
 * so it is a real frame. */
typedef unsigned long (*step_fn)(void *const *steps, int k, unsigned long x);

volatile unsigned long chainstep_sink;

unsigned long step(void *const *steps, int k, unsigned long x)
{
	unsigned long r = ((step_fn)steps[k + 1])(steps, k + 1, x + (unsigned long)k);

	chainstep_sink += r;
	return r ^ (unsigned long)k;
}
