/* nfq_delay.c - a userspace packet delayer for tests/py/netns.py, where the
 * kernel has no sch_netem: a firewall rule in a node's namespace sends each
 * packet leaving its eth0 to NFQUEUE queue Q (nft `queue num Q bypass`, or
 * iptables `-j NFQUEUE --queue-num Q --queue-bypass`); this program, run in
 * the same namespace, holds each one DELAY_MS and then accepts it, in the
 * order they came (a fixed delay keeps the order, as netem's does).
 *
 *   nfq_delay QUEUE DELAY_MS
 *
 * Prints "ready" on stdout once bound (the harness adds the rule after it:
 * with `bypass`, packets pass undelayed while nothing listens). Ends on
 * SIGTERM or SIGINT; packets still held are then dropped by the kernel, as
 * a link would lose them. Only the packet ids cross (copy mode META): the
 * payload is never read. Exit 2: bad arguments; 1: the queue cannot be
 * bound (no CAP_NET_ADMIN, or nfnetlink_queue missing). */
#include <arpa/inet.h> /* before linux/netfilter.h: glibc's in.h first */
#include <errno.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <libnetfilter_queue/libnetfilter_queue.h>

#define HELD_MAX 65536 /* packets held at once; more are accepted at once */

typedef struct held_s {
  uint32_t id;
  uint64_t due_ms;
} held_t;

typedef struct delayer_s {
  struct nfq_q_handle *qh;
  uint64_t delay_ms;
  held_t *ring;
  size_t head, n;
  unsigned long long passed, overflow;
} delayer_t;

static volatile sig_atomic_t stop_sig;

static void on_signal(int sig) { stop_sig = sig; }

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* One packet queued by the kernel: hold it (or pass it when full). */
static int on_packet(struct nfq_q_handle *qh, struct nfgenmsg *msg,
                     struct nfq_data *nfa, void *arg) {
  delayer_t *d = arg;
  struct nfqnl_msg_packet_hdr *ph = nfq_get_msg_packet_hdr(nfa);
  uint32_t id;
  (void)msg;
  if (ph == NULL)
    return 0;
  id = ntohl(ph->packet_id);
  if (d->n == HELD_MAX) {
    d->overflow++;
    return nfq_set_verdict(qh, id, NF_ACCEPT, 0, NULL) < 0 ? -1 : 0;
  }
  d->ring[(d->head + d->n) % HELD_MAX] = (held_t){id, now_ms() + d->delay_ms};
  d->n++;
  return 0;
}

/* Accept every held packet whose time came, oldest first. RET the ms until
 * the next one is due, -1 when none is held. */
static int release_due(delayer_t *d) {
  uint64_t now = now_ms();
  while (d->n > 0) {
    held_t *h = &d->ring[d->head];
    if (h->due_ms > now)
      return (int)(h->due_ms - now);
    nfq_set_verdict(d->qh, h->id, NF_ACCEPT, 0, NULL);
    d->head = (d->head + 1) % HELD_MAX;
    d->n--;
    d->passed++;
  }
  return -1;
}

static int parse_uint(const char *s, long max, long *out) {
  char *end;
  errno = 0;
  *out = strtol(s, &end, 10);
  return errno == 0 && end != s && *end == '\0' && *out >= 0 && *out <= max
             ? 0
             : -1;
}

int main(int argc, char **argv) {
  static char buf[65536];
  struct nfq_handle *h;
  delayer_t d;
  struct sigaction sa;
  long queue, delay;
  int fd, rc = 0;
  if (argc != 3 || parse_uint(argv[1], 65535, &queue) != 0 ||
      parse_uint(argv[2], 60000, &delay) != 0) {
    fprintf(stderr, "usage: nfq_delay QUEUE DELAY_MS (QUEUE 0..65535, "
                    "DELAY_MS 0..60000)\n");
    return 2;
  }
  memset(&d, 0, sizeof(d));
  d.delay_ms = (uint64_t)delay;
  if ((d.ring = calloc(HELD_MAX, sizeof(*d.ring))) == NULL) {
    fprintf(stderr, "nfq_delay: out of memory\n");
    return 1;
  }
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, NULL);
  sigaction(SIGINT, &sa, NULL);
  if ((h = nfq_open()) == NULL) {
    fprintf(stderr, "nfq_delay: nfq_open failed: %s (needs CAP_NET_ADMIN "
                    "and nfnetlink_queue)\n", strerror(errno));
    free(d.ring);
    return 1;
  }
  if ((d.qh = nfq_create_queue(h, (uint16_t)queue, on_packet, &d)) == NULL ||
      nfq_set_mode(d.qh, NFQNL_COPY_META, 0) < 0) {
    fprintf(stderr, "nfq_delay: cannot bind queue %ld: %s (another "
                    "program holds it?)\n", queue, strerror(errno));
    nfq_close(h);
    free(d.ring);
    return 1;
  }
  /* Room for what a 16-node test sends within the delay. */
  nfq_set_queue_maxlen(d.qh, HELD_MAX);
  nfnl_rcvbufsiz(nfq_nfnlh(h), 8u << 20);
  fd = nfq_fd(h);
  printf("ready\n");
  fflush(stdout);
  while (!stop_sig) {
    struct pollfd p = {fd, POLLIN, 0};
    int wait = release_due(&d);
    int n = poll(&p, 1, wait < 0 ? 1000 : wait);
    if (n < 0 && errno != EINTR) {
      fprintf(stderr, "nfq_delay: poll: %s\n", strerror(errno));
      rc = 1;
      break;
    }
    if (n > 0 && (p.revents & POLLIN)) {
      ssize_t len = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
      /* ENOBUFS: the kernel dropped messages it could not queue to us
       * (those packets are lost, as on a full link); go on. */
      if (len > 0)
        nfq_handle_packet(h, buf, (int)len);
      else if (len < 0 && errno != EAGAIN && errno != EINTR &&
               errno != ENOBUFS) {
        fprintf(stderr, "nfq_delay: recv: %s\n", strerror(errno));
        rc = 1;
        break;
      }
    }
  }
  fprintf(stderr, "nfq_delay: queue %ld, %ld ms: %llu packets delayed, %llu "
                  "passed at once (more than %d held)\n", queue, delay,
          d.passed, d.overflow, HELD_MAX);
  nfq_destroy_queue(d.qh);
  nfq_close(h);
  free(d.ring);
  return rc;
}
