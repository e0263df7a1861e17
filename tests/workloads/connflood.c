/*
 * connflood: a local user flooding a loopback HTTP server with connections.
 * Usage: connflood PORT PATH SECONDS OUT. For SECONDS it keeps up to 256
 * connections to 127.0.0.1:PORT in flight, each sending "GET PATH" at once
 * (a connect completes in the kernel before the server accepts, so the
 * server's accept queue fills as fast as this loop runs); a slot is reused
 * after reading whatever its old connection got. At the end it writes
 * "connections N\nanswered_bytes B\n" to OUT: B counts every byte any
 * connection received, so a server that answers none of them leaves 0.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SLOTS 256

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Read what `fd` got (without waiting), close it; returns the bytes. */
static long drain(int fd)
{
	char buf[4096];
	long got = 0;
	ssize_t n;

	while ((n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT)) > 0)
		got += n;
	close(fd);
	return got;
}

int main(int argc, char **argv)
{
	if (argc != 5) {
		fprintf(stderr, "usage: connflood PORT PATH SECONDS OUT\n");
		return 2;
	}
	struct sockaddr_in addr = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[1])) };
	char request[512];
	int len = snprintf(request, sizeof(request), "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", argv[2]);
	double end = now() + atof(argv[3]);
	int slots[SLOTS];
	long connections = 0, answered = 0;

	inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
	for (int i = 0; i < SLOTS; i++)
		slots[i] = -1;
	for (int i = 0; now() < end; i = (i + 1) % SLOTS) {
		if (slots[i] >= 0)
			answered += drain(slots[i]);
		slots[i] = socket(AF_INET, SOCK_STREAM, 0);
		if (slots[i] < 0)
			continue;
		/* A full accept queue makes connect wait for the SYN's retries:
		 * give up after 100 ms and go on with the next slot. */
		struct timeval t = { 0, 100000 };
		setsockopt(slots[i], SOL_SOCKET, SO_SNDTIMEO, &t, sizeof(t));
		if (connect(slots[i], (struct sockaddr *)&addr, sizeof(addr)) != 0) {
			close(slots[i]);
			slots[i] = -1;
			continue;
		}
		connections++;
		send(slots[i], request, len, MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	/* Give the last ones a moment to be answered, if they ever were. */
	usleep(200000);
	for (int i = 0; i < SLOTS; i++)
		if (slots[i] >= 0)
			answered += drain(slots[i]);
	FILE *out = fopen(argv[4], "w");
	if (!out)
		return 1;
	fprintf(out, "connections %ld\nanswered_bytes %ld\n", connections, answered);
	return fclose(out) != 0;
}
