/* Drives one end of an rsocket stream with operations drawn from a seed:
 *   rsock_stream server|client ADDR PORT SEED TOTAL MAXCHUNK NONBLOCK
 * The client sends TOTAL bytes of a position-derived pattern with rsend, rwrite and
 * rwritev in random sizes; the server reads them with rrecv, rread, MSG_PEEK and
 * MSG_WAITALL in random sizes and checks every byte. Non-blocking ends wait in rpoll.
 * The server answers 'K' once all bytes matched; both exit 0 only then. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <rdma/rsocket.h>

static uint64_t rng;

static uint64_t next(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static uint8_t pattern(uint64_t pos, uint64_t seed)
{
	return (uint8_t)((pos * 131) ^ (pos >> 9) ^ seed);
}

static int wait_for(int s, short ev)
{
	struct pollfd p = { .fd = s, .events = ev };
	int r = rpoll(&p, 1, 10000);

	if (r <= 0) {
		fprintf(stderr, "rpoll: %d (%s)\n", r, r ? strerror(errno) : "timeout");
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai;
	uint64_t seed, total, maxchunk, done = 0;
	int server, nonblock, s, ls;
	static uint8_t buf[1 << 21], peek[1 << 21];

	if (argc != 8) {
		fprintf(stderr, "usage: %s server|client ADDR PORT SEED TOTAL MAXCHUNK NONBLOCK\n", argv[0]);
		return 2;
	}
	server = !strcmp(argv[1], "server");
	seed = strtoull(argv[4], NULL, 0);
	total = strtoull(argv[5], NULL, 0);
	maxchunk = strtoull(argv[6], NULL, 0);
	nonblock = atoi(argv[7]);
	if (!maxchunk || maxchunk > sizeof(buf))
		maxchunk = sizeof(buf);
	rng = (seed | 1) ^ (server ? 0x9e3779b97f4a7c15ULL : 0);
	if (getaddrinfo(argv[2], argv[3], &hints, &ai)) {
		fprintf(stderr, "getaddrinfo failed\n");
		return 1;
	}
	if (server) {
		ls = rsocket(AF_INET, SOCK_STREAM, 0);
		if (ls < 0 || rbind(ls, ai->ai_addr, ai->ai_addrlen) || rlisten(ls, 1)) {
			perror("listen");
			return 1;
		}
		s = raccept(ls, NULL, NULL);
		if (s < 0) {
			perror("raccept");
			return 1;
		}
	} else {
		s = rsocket(AF_INET, SOCK_STREAM, 0);
		if (s < 0 || rconnect(s, ai->ai_addr, ai->ai_addrlen)) {
			perror("rconnect");
			return 1;
		}
	}
	if (nonblock && rfcntl(s, F_SETFL, O_NONBLOCK)) {
		perror("rfcntl");
		return 1;
	}
	while (done < total) {
		uint64_t n = 1 + next() % maxchunk, i;
		int op = next() % 4;
		ssize_t r;

		if (n > total - done)
			n = total - done;
		if (!server) {
			for (i = 0; i < n; i++)
				buf[i] = pattern(done + i, seed);
			if (op == 0) {
				r = rsend(s, buf, n, 0);
			} else if (op == 1) {
				r = rwrite(s, buf, n);
			} else {
				struct iovec v[2] = { { buf, n / 2 }, { buf + n / 2, n - n / 2 } };
				r = rwritev(s, v, n / 2 ? 2 : 1);
				if (!(n / 2))
					r = rwritev(s, &v[1], 1);
			}
		} else if (op == 0) {
			r = rrecv(s, buf, n, 0);
		} else if (op == 1) {
			r = rread(s, buf, n);
		} else if (op == 2) {
			r = rrecv(s, peek, n, MSG_PEEK);
			if (r > 0) {
				ssize_t got = rrecv(s, buf, r, 0);
				if (got != r || memcmp(peek, buf, r)) {
					fprintf(stderr, "peek %zd then read %zd differ\n", r, got);
					return 1;
				}
			}
		} else {
			r = rrecv(s, buf, n, nonblock ? 0 : MSG_WAITALL);
			if (!nonblock && r >= 0 && (uint64_t)r != n) {
				fprintf(stderr, "MSG_WAITALL returned %zd of %llu\n", r,
					(unsigned long long)n);
				return 1;
			}
		}
		if (r < 0) {
			if (nonblock && (errno == EAGAIN || errno == EWOULDBLOCK)) {
				if (wait_for(s, server ? POLLIN : POLLOUT))
					return 1;
				continue;
			}
			perror(server ? "rrecv" : "rsend");
			return 1;
		}
		if (r == 0 && server) {
			fprintf(stderr, "end of stream after %llu of %llu bytes\n",
				(unsigned long long)done, (unsigned long long)total);
			return 1;
		}
		if (server) {
			for (i = 0; i < (uint64_t)r; i++) {
				if (buf[i] != pattern(done + i, seed)) {
					fprintf(stderr, "byte %llu differs\n",
						(unsigned long long)(done + i));
					return 1;
				}
			}
		}
		done += r;
	}
	if (server) {
		char k = 'K';
		while (rsend(s, &k, 1, 0) != 1) {
			if (!nonblock || errno != EAGAIN || wait_for(s, POLLOUT))
				return 1;
		}
	} else {
		char k = 0;
		ssize_t r;
		while ((r = rrecv(s, &k, 1, 0)) != 1) {
			if (r == 0 || !nonblock || errno != EAGAIN || wait_for(s, POLLIN)) {
				fprintf(stderr, "no answer from the server\n");
				return 1;
			}
		}
		if (k != 'K')
			return 1;
	}
	printf("%s: %llu bytes ok\n", argv[1], (unsigned long long)done);
	rclose(s);
	return 0;
}
