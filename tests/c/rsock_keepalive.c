/* One idle rsocket connection, with or without keepalive:
 *   rsock_keepalive server ADDR PORT
 *   rsock_keepalive client ADDR PORT SECONDS on|off
 * The server accepts one connection and reads until it ends. The client connects,
 * turns SO_KEEPALIVE on with TCP_KEEPIDLE 1 (or leaves it off), checks the option
 * reads back, stays idle for SECONDS and closes. Both print "done" and exit 0. */
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <rdma/rsocket.h>

static int fail(const char *what)
{
	perror(what);
	return 1;
}

int main(int argc, char **argv)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res;
	int server, s, one = 1, val = 0;
	socklen_t len = sizeof val;
	char buf[64];

	if (argc < 4 || (strcmp(argv[1], "server") && argc < 6)) {
		fprintf(stderr, "usage: %s server|client ADDR PORT [SECONDS on|off]\n", argv[0]);
		return 2;
	}
	server = !strcmp(argv[1], "server");
	if (getaddrinfo(argv[2], argv[3], &hints, &res))
		return fail("getaddrinfo");
	s = rsocket(res->ai_family, SOCK_STREAM, 0);
	if (s < 0)
		return fail("rsocket");
	if (server) {
		int c;

		if (rbind(s, res->ai_addr, res->ai_addrlen) || rlisten(s, 1))
			return fail("rbind/rlisten");
		c = raccept(s, NULL, NULL);
		if (c < 0)
			return fail("raccept");
		while (rrecv(c, buf, sizeof buf, 0) > 0)
			;
		rclose(c);
	} else {
		if (rconnect(s, res->ai_addr, res->ai_addrlen))
			return fail("rconnect");
		if (!strcmp(argv[5], "on")) {
			if (rsetsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) ||
			    rsetsockopt(s, IPPROTO_TCP, TCP_KEEPIDLE, &one, sizeof one))
				return fail("rsetsockopt");
			if (rgetsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &val, &len) || val != 1)
				return fail("rgetsockopt SO_KEEPALIVE");
		}
		sleep(atoi(argv[4]));
	}
	rclose(s);
	freeaddrinfo(res);
	printf("done\n");
	return 0;
}
