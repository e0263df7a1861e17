/*
 * naps: sleeps argv[1] microseconds (default 50) in a loop until killed, so
 * the machine sees tens of thousands of short waits a second at almost no
 * CPU: a steady stream of off-CPU records for an agent's windows.
 */
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
	long us = argc > 1 ? atol(argv[1]) : 50;
	struct timespec nap = { us / 1000000, (us % 1000000) * 1000 };

	for (;;)
		nanosleep(&nap, NULL);
}
