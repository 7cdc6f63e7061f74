/*
 * loadgen: open-loop memcached load generator (text protocol, TCP, IPv4).
 *
 * Usage: loadgen -p PORT -r RATE [-d SECONDS] [-w WARMUP] [-c CONNS] [-t THREADS]
 *                [-k KEYS] [-v VALUE_BYTES] [-g GET_PERCENT] [-u] [-s SEED]
 *                [-G GRACE] [-H ADDR] [-P SERVER_PID]
 *
 * Stores KEYS keys (VALUE_BYTES each) first, then sends requests (GET_PERCENT
 * gets, the rest sets, uniformly random keys) at RATE requests/s in total for
 * WARMUP + SECONDS seconds over CONNS connections, handled by THREADS client
 * threads. Arrivals are Poisson (exponential gaps) by default, evenly spaced
 * with -u. The schedule never waits for answers: a connection may have any
 * number of requests outstanding (memcached answers them in order), so a
 * server stall delays every request scheduled during it, and latency is taken
 * from each request's *scheduled* send time to the end of its response (no
 * coordinated omission). Requests scheduled during the warm-up are not
 * counted. Prints one JSON line; "lag" is how late requests were handed to
 * the kernel relative to their schedule: a lag p99 near the latency p99 means
 * the client, not the server, is the bottleneck.
 *
 * Build: cc -O2 -pthread -o loadgen loadgen.c -lm
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#define NS 1000000000ULL
#define MAX_LINE 4096 /* longest response line we accept before declaring desync */

static void die(const char *fmt, const char *arg) {
    fprintf(stderr, "loadgen: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    exit(2);
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * NS + t.tv_nsec;
}

/* ---- log-linear histogram: 64 linear sub-buckets per power of two (<1.6% error) ---- */

enum { SUB_BITS = 6, SUB = 1 << SUB_BITS, HIST_BUCKETS = (64 - SUB_BITS + 1) * SUB };

struct hist {
    uint64_t n[HIST_BUCKETS];
    uint64_t count, max;
};

static unsigned hist_index(uint64_t v) {
    if (v < 2 * SUB)
        return v;
    unsigned e = 63 - __builtin_clzll(v) - SUB_BITS; /* v >> e lies in [SUB, 2*SUB) */
    return e * SUB + (v >> e);
}

static uint64_t hist_value(unsigned i) { /* middle of bucket i */
    if (i < 2 * SUB)
        return i;
    unsigned e = i / SUB - 1;
    return ((uint64_t)(i - e * SUB) << e) + ((1ULL << e) >> 1);
}

static void hist_add(struct hist *h, uint64_t v) {
    h->n[hist_index(v)]++;
    h->count++;
    if (v > h->max)
        h->max = v;
}

static void hist_merge(struct hist *into, const struct hist *h) {
    for (unsigned i = 0; i < HIST_BUCKETS; i++)
        into->n[i] += h->n[i];
    into->count += h->count;
    if (h->max > into->max)
        into->max = h->max;
}

static double hist_pct_us(const struct hist *h, double pct) {
    if (!h->count)
        return 0;
    uint64_t rank = (uint64_t)ceil(pct / 100 * h->count), seen = 0;
    if (rank < 1)
        rank = 1;
    for (unsigned i = 0; i < HIST_BUCKETS; i++)
        if ((seen += h->n[i]) >= rank)
            return (hist_value(i) < h->max ? hist_value(i) : h->max) / 1e3;
    return h->max / 1e3;
}

/* ---- configuration (set once in main, read-only afterwards) ---- */

static struct sockaddr_in server;
static double rate = 0, seconds = 10, warmup = 1, grace = 2;
static int nconns = 8, nthreads = 1, keys = 10000, value_size = 100, get_pct = 90, uniform = 0;
static unsigned long seed = 1;
static char *value; /* value_size bytes of 'x' followed by "\r\n" */
static uint64_t t0, t_warm, t_end; /* schedule start, end of warm-up, end of schedule */

/* ---- connections ---- */

struct buf {
    char *p;
    size_t len, cap;
};

static void buf_reserve(struct buf *b, size_t extra) {
    if (b->len + extra <= b->cap)
        return;
    while (b->len + extra > b->cap)
        b->cap = b->cap ? 2 * b->cap : 65536;
    if (!(b->p = realloc(b->p, b->cap)))
        die("%s", "out of memory");
}

struct req {
    uint64_t sched; /* scheduled send time */
    int get;
};

struct conn {
    int fd, want_out; /* want_out: EPOLLOUT registered because the socket buffer was full */
    struct buf out, in;
    struct req *q; /* requests sent (or queued to send) and not yet answered: a ring */
    size_t qhead, qlen, qcap;
};

static int connect_one(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&server, sizeof server) < 0) {
        char msg[128];
        snprintf(msg, sizeof msg, "%s:%d: %s", inet_ntoa(server.sin_addr), ntohs(server.sin_port),
                 strerror(errno));
        die("cannot connect to memcached at %s", msg);
    }
    int one = 1; /* requests are small and latency matters: no Nagle delay */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void q_push(struct conn *c, struct req r) {
    if (c->qlen == c->qcap) { /* grow the ring, unwrapping it */
        size_t cap = c->qcap ? 2 * c->qcap : 1024;
        struct req *q = malloc(cap * sizeof *q);
        if (!q)
            die("%s", "out of memory");
        for (size_t i = 0; i < c->qlen; i++)
            q[i] = c->q[(c->qhead + i) % c->qcap];
        free(c->q);
        c->q = q, c->qcap = cap, c->qhead = 0;
    }
    c->q[(c->qhead + c->qlen++) % c->qcap] = r;
}

/* ---- one client thread ---- */

struct worker {
    pthread_t thread;
    int id, epfd, timerfd;
    struct conn *conns; /* this thread's connections */
    int nconns;
    uint64_t rng;
    struct hist lat, lag;
    uint64_t scheduled; /* requests scheduled after the warm-up */
    uint64_t in_window; /* responses received between the warm-up and the schedule's end */
    uint64_t errors, misses, unfinished;
};

static uint64_t next_rand(struct worker *w) { /* xorshift64* */
    w->rng ^= w->rng >> 12, w->rng ^= w->rng << 25, w->rng ^= w->rng >> 27;
    return w->rng * 0x2545F4914F6CDD1DULL;
}

/* Gap to this thread's next request, ns: its share of the rate, Poisson or even. */
static uint64_t next_gap(struct worker *w) {
    double mean = NS * (double)nthreads / rate;
    if (uniform)
        return (uint64_t)mean;
    double u = ((next_rand(w) >> 11) + 1) * 0x1.0p-53; /* (0, 1] */
    return (uint64_t)(-log(u) * mean);
}

static void send_request(struct worker *w, struct conn *c, uint64_t sched, uint64_t now) {
    uint64_t r = next_rand(w);
    unsigned key = (r >> 32) % keys;
    int get = (r & 0xffffffff) % 100 < (unsigned)get_pct;
    buf_reserve(&c->out, 64 + value_size);
    char *p = c->out.p + c->out.len;
    if (get)
        c->out.len += sprintf(p, "get key:%u\r\n", key);
    else {
        c->out.len += sprintf(p, "set key:%u 0 0 %d\r\n", key, value_size);
        memcpy(c->out.p + c->out.len, value, value_size + 2);
        c->out.len += value_size + 2;
    }
    q_push(c, (struct req){sched, get});
    if (sched >= t_warm) {
        w->scheduled++;
        hist_add(&w->lag, now - sched);
    }
}

static void set_events(struct worker *w, struct conn *c, int want_out) {
    struct epoll_event ev = {.events = EPOLLIN | (want_out ? EPOLLOUT : 0), .data.ptr = c};
    if (epoll_ctl(w->epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
        die("epoll_ctl: %s", strerror(errno));
    c->want_out = want_out;
}

static void flush(struct worker *w, struct conn *c) {
    size_t done = 0;
    while (done < c->out.len) {
        ssize_t n = send(c->fd, c->out.p + done, c->out.len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            die("send to memcached failed: %s", strerror(errno));
        }
        done += n;
    }
    memmove(c->out.p, c->out.p + done, c->out.len - done);
    c->out.len -= done;
    if ((c->out.len > 0) != c->want_out) /* wait for room only while something is left */
        set_events(w, c, c->out.len > 0);
}

static void complete(struct worker *w, struct conn *c, uint64_t now, int ok, int miss) {
    struct req r = c->q[c->qhead];
    c->qhead = (c->qhead + 1) % c->qcap, c->qlen--;
    if (now >= t_warm && now <= t_end)
        w->in_window++;
    if (r.sched < t_warm)
        return;
    hist_add(&w->lat, now - r.sched);
    w->errors += !ok;
    w->misses += miss;
}

static int starts(const char *line, size_t len, const char *word) {
    size_t n = strlen(word);
    return len >= n && memcmp(line, word, n) == 0;
}

/* Consumes every complete response in c->in, oldest request first. A one-line
 * answer other than the expected one (ERROR, SERVER_ERROR ..., NOT_STORED)
 * counts as an error for the oldest request; a get answer that cannot be
 * framed is fatal, as the stream is then out of sync. */
static void parse(struct worker *w, struct conn *c, uint64_t now) {
    size_t pos = 0;
    while (c->qlen) {
        char *line = c->in.p + pos;
        size_t avail = c->in.len - pos;
        char *nl = memchr(line, '\n', avail);
        if (!nl) {
            if (avail > MAX_LINE)
                die("%s", "protocol error: response line too long (out of sync with memcached?)");
            break;
        }
        size_t line_len = nl - line + 1, text_len = line_len - 1 - (nl > line && nl[-1] == '\r');
        size_t take = line_len;
        int ok = 0, miss = 0;
        if (c->q[c->qhead].get) {
            if (starts(line, text_len, "VALUE ")) {
                /* VALUE <key> <flags> <bytes>\r\n<data>\r\nEND\r\n */
                const char *space = memrchr(line, ' ', text_len);
                unsigned long bytes = strtoul(space + 1, NULL, 10);
                if (bytes > 1 << 20)
                    die("%s", "protocol error: implausible value size (out of sync with memcached?)");
                take = line_len + bytes + 2 + 5;
                if (take > avail)
                    break; /* the rest has not arrived yet */
                ok = memcmp(line + line_len + bytes, "\r\nEND\r\n", 7) == 0;
                if (!ok)
                    die("%s", "protocol error: malformed get response (out of sync with memcached?)");
            } else if (text_len == 3 && starts(line, text_len, "END"))
                ok = miss = 1; /* a miss: all keys were stored, so only after an eviction */
        } else
            ok = text_len == 6 && starts(line, text_len, "STORED");
        pos += take;
        complete(w, c, now, ok, miss);
    }
    memmove(c->in.p, c->in.p + pos, c->in.len - pos);
    c->in.len -= pos;
}

static void receive(struct worker *w, struct conn *c) {
    for (;;) {
        buf_reserve(&c->in, 65536);
        ssize_t n = recv(c->fd, c->in.p + c->in.len, c->in.cap - c->in.len, MSG_DONTWAIT);
        if (n == 0)
            die("%s", "memcached closed a connection");
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            die("recv from memcached failed: %s", strerror(errno));
        }
        c->in.len += n;
    }
    parse(w, c, now_ns());
}

static void arm_timer(struct worker *w, uint64_t at) {
    struct itimerspec its = {.it_value = {.tv_sec = at / NS, .tv_nsec = at % NS}};
    if (timerfd_settime(w->timerfd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
        die("timerfd_settime: %s", strerror(errno));
}

static void *run_worker(void *arg) {
    struct worker *w = arg;
    /* Sleeps end on a timerfd (nanosecond resolution; epoll_wait's timeout is in ms). */
    if ((w->epfd = epoll_create1(0)) < 0 || (w->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK)) < 0)
        die("epoll/timerfd: %s", strerror(errno));
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->timerfd, &ev) < 0)
        die("epoll_ctl: %s", strerror(errno));
    for (int i = 0; i < w->nconns; i++) {
        ev.data.ptr = &w->conns[i];
        if (epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->conns[i].fd, &ev) < 0)
            die("epoll_ctl: %s", strerror(errno));
    }
    /* Even spacing: thread i takes every nthreads-th slot of the total schedule. */
    uint64_t next = t0 + (uniform ? (uint64_t)(NS * w->id / rate) : next_gap(w)), armed = 0;
    uint64_t stop = t_end + (uint64_t)(grace * NS);
    int rr = 0; /* requests go to this thread's connections in turn */
    for (;;) {
        uint64_t now = now_ns();
        if (next <= now && next < t_end) {
            while (next <= now && next < t_end) {
                send_request(w, &w->conns[rr], next, now);
                rr = (rr + 1) % w->nconns;
                next += next_gap(w);
            }
            for (int i = 0; i < w->nconns; i++)
                if (w->conns[i].out.len && !w->conns[i].want_out)
                    flush(w, &w->conns[i]);
        }
        int outstanding = 0;
        for (int i = 0; i < w->nconns; i++)
            outstanding |= w->conns[i].qlen > 0;
        if ((next >= t_end && !outstanding) || now >= stop)
            break;
        uint64_t wake = next < t_end ? next : stop;
        if (wake != armed)
            arm_timer(w, armed = wake);
        struct epoll_event evs[64];
        int n = epoll_wait(w->epfd, evs, 64, -1);
        if (n < 0 && errno != EINTR)
            die("epoll_wait: %s", strerror(errno));
        for (int i = 0; i < n; i++) {
            struct conn *c = evs[i].data.ptr;
            if (!c) { /* the timer fired: it is disarmed now */
                uint64_t expirations;
                if (read(w->timerfd, &expirations, sizeof expirations) < 0 && errno != EAGAIN)
                    die("timerfd read: %s", strerror(errno));
                armed = 0;
                continue;
            }
            if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
                receive(w, c);
            if (evs[i].events & EPOLLOUT)
                flush(w, c);
        }
    }
    /* Requests still unanswered at the end count with their age so far (a lower bound). */
    uint64_t now = now_ns();
    for (int i = 0; i < w->nconns; i++) {
        struct conn *c = &w->conns[i];
        for (size_t j = 0; j < c->qlen; j++) {
            struct req r = c->q[(c->qhead + j) % c->qcap];
            if (r.sched >= t_warm) {
                hist_add(&w->lat, now - r.sched);
                w->unfinished++;
            }
        }
    }
    return NULL;
}

/* ---- setup ---- */

/* Stores every key once over a blocking connection, in pipelined batches, so gets hit. */
static void preload(void) {
    int fd = connect_one();
    struct buf b = {0};
    char resp[4096];
    for (int first = 0; first < keys; first += 100) {
        int batch = keys - first < 100 ? keys - first : 100;
        b.len = 0;
        for (int k = first; k < first + batch; k++) {
            buf_reserve(&b, 64 + value_size);
            b.len += sprintf(b.p + b.len, "set key:%d 0 0 %d\r\n", k, value_size);
            memcpy(b.p + b.len, value, value_size + 2);
            b.len += value_size + 2;
        }
        for (size_t done = 0; done < b.len;) {
            ssize_t n = send(fd, b.p + done, b.len - done, MSG_NOSIGNAL);
            if (n <= 0)
                die("preload: send failed: %s", strerror(errno));
            done += n;
        }
        /* Expect exactly `batch` answers of "STORED\r\n" (8 bytes each). */
        size_t kept = 0;
        for (int stored = 0; stored < batch;) {
            ssize_t n = recv(fd, resp + kept, sizeof resp - 1 - kept, 0);
            if (n <= 0)
                die("preload: memcached closed the connection or failed: %s", n ? strerror(errno) : "EOF");
            size_t end = kept + n, off = 0;
            for (; off + 8 <= end; off += 8, stored++)
                if (memcmp(resp + off, "STORED\r\n", 8) != 0) {
                    resp[end] = 0;
                    die("preload: set failed, memcached said: %.80s", resp + off);
                }
            memmove(resp, resp + off, kept = end - off); /* a partial answer waits for the rest */
        }
    }
    free(b.p);
    close(fd);
}

/* User + system CPU seconds of a process, from /proc/PID/stat (-1 if unreadable). */
static double proc_cpu(long pid) {
    char path[64], text[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = 0;
    char *p = strrchr(text, ')'); /* the command name may contain spaces */
    unsigned long utime, stime;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &utime, &stime) != 2)
        return -1;
    return (double)(utime + stime) / sysconf(_SC_CLK_TCK);
}

/* CPU seconds that the whole machine spent busy (all CPUs, including time stolen
 * by the hypervisor), from /proc/stat: shows how much else ran beside us. */
static double machine_busy(void) {
    unsigned long long user, nice, sys, idle, iowait, irq, softirq, steal;
    FILE *f = fopen("/proc/stat", "r");
    int n = f ? fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &sys, &idle,
                       &iowait, &irq, &softirq, &steal)
              : 0;
    if (f)
        fclose(f);
    return n == 8 ? (double)(user + nice + sys + irq + softirq + steal) / sysconf(_SC_CLK_TCK) : -1;
}

static double cpu_self(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void sleep_until(uint64_t at) {
    struct timespec t = {.tv_sec = at / NS, .tv_nsec = at % NS};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) == EINTR)
        ;
}

static void usage(void) {
    fprintf(stderr, "usage: loadgen -p PORT -r RATE [-d SECONDS=10] [-w WARMUP=1] [-c CONNS=8] "
                    "[-t THREADS=1]\n               [-k KEYS=10000] [-v VALUE_BYTES=100] "
                    "[-g GET_PERCENT=90] [-u] [-s SEED=1]\n               [-G GRACE=2] "
                    "[-H ADDR=127.0.0.1] [-P SERVER_PID]\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *addr = "127.0.0.1";
    int port = 0, opt;
    long server_pid = 0;
    while ((opt = getopt(argc, argv, "p:r:d:w:c:t:k:v:g:us:G:H:P:")) != -1) {
        switch (opt) {
        case 'p': port = atoi(optarg); break;
        case 'r': rate = atof(optarg); break;
        case 'd': seconds = atof(optarg); break;
        case 'w': warmup = atof(optarg); break;
        case 'c': nconns = atoi(optarg); break;
        case 't': nthreads = atoi(optarg); break;
        case 'k': keys = atoi(optarg); break;
        case 'v': value_size = atoi(optarg); break;
        case 'g': get_pct = atoi(optarg); break;
        case 'u': uniform = 1; break;
        case 's': seed = strtoul(optarg, NULL, 10); break;
        case 'G': grace = atof(optarg); break;
        case 'H': addr = optarg; break;
        case 'P': server_pid = atol(optarg); break;
        default: usage();
        }
    }
    if (optind != argc || port <= 0 || port > 65535 || rate <= 0 || seconds <= 0 || warmup < 0 ||
        grace < 0 || nthreads < 1 || nconns < nthreads || keys < 1 || value_size < 0 ||
        value_size > 1 << 20 || get_pct < 0 || get_pct > 100)
        usage();
    server.sin_family = AF_INET;
    server.sin_port = htons(port);
    if (inet_pton(AF_INET, addr, &server.sin_addr) != 1)
        die("bad IPv4 address: %s", addr);
    if (!(value = malloc(value_size + 2)))
        die("%s", "out of memory");
    memset(value, 'x', value_size);
    memcpy(value + value_size, "\r\n", 2);

    preload();
    struct conn *conns = calloc(nconns, sizeof *conns);
    struct worker *workers = calloc(nthreads, sizeof *workers);
    if (!conns || !workers)
        die("%s", "out of memory");
    for (int i = 0; i < nconns; i++)
        conns[i].fd = connect_one();

    t0 = now_ns() + NS / 100; /* a little time for the threads to start */
    t_warm = t0 + (uint64_t)(warmup * NS);
    t_end = t_warm + (uint64_t)(seconds * NS);
    for (int i = 0, first = 0; i < nthreads; i++) {
        struct worker *w = &workers[i];
        w->id = i;
        w->conns = conns + first; /* contiguous share of the connections */
        w->nconns = nconns / nthreads + (i < nconns % nthreads);
        first += w->nconns;
        w->rng = (seed + 1) * 0x9E3779B97F4A7C15ULL + i * 0xBF58476D1CE4E5B9ULL;
        if (pthread_create(&w->thread, NULL, run_worker, w))
            die("%s", "pthread_create failed");
    }
    /* CPU use over the measured window only: sampled at its start and end. */
    sleep_until(t_warm);
    uint64_t wall0 = now_ns();
    double client0 = cpu_self(), server0 = server_pid ? proc_cpu(server_pid) : -1, busy0 = machine_busy();
    sleep_until(t_end);
    double wall = (now_ns() - wall0) / 1e9;
    double client1 = cpu_self(), server1 = server_pid ? proc_cpu(server_pid) : -1, busy1 = machine_busy();

    struct hist *lat = calloc(1, sizeof *lat), *lag = calloc(1, sizeof *lag);
    uint64_t scheduled = 0, in_window = 0, errors = 0, misses = 0, unfinished = 0;
    for (int i = 0; i < nthreads; i++) {
        struct worker *w = &workers[i];
        pthread_join(w->thread, NULL);
        hist_merge(lat, &w->lat);
        hist_merge(lag, &w->lag);
        scheduled += w->scheduled, in_window += w->in_window;
        errors += w->errors, misses += w->misses, unfinished += w->unfinished;
    }
    double server_cpu = server0 >= 0 && server1 >= 0 ? 100 * (server1 - server0) / wall : -1;
    double machine_cpu = busy0 >= 0 && busy1 >= 0 ? 100 * (busy1 - busy0) / wall : -1;
    printf("{\"rate\": %.0f, \"arrivals\": \"%s\", \"seconds\": %g, \"warmup\": %g, \"conns\": %d, "
           "\"threads\": %d, \"scheduled\": %llu, \"throughput\": %.1f, "
           "\"p50_us\": %.1f, \"p90_us\": %.1f, \"p99_us\": %.1f, \"p999_us\": %.1f, \"max_us\": %.1f, "
           "\"lag_p50_us\": %.1f, \"lag_p99_us\": %.1f, \"lag_p999_us\": %.1f, "
           "\"errors\": %llu, \"misses\": %llu, \"unfinished\": %llu, "
           "\"client_cpu_pct\": %.1f, \"server_cpu_pct\": %.1f, \"machine_cpu_pct\": %.1f}\n",
           rate, uniform ? "uniform" : "poisson", seconds, warmup, nconns, nthreads,
           (unsigned long long)scheduled, in_window / seconds, hist_pct_us(lat, 50),
           hist_pct_us(lat, 90), hist_pct_us(lat, 99), hist_pct_us(lat, 99.9), lat->max / 1e3,
           hist_pct_us(lag, 50), hist_pct_us(lag, 99), hist_pct_us(lag, 99.9),
           (unsigned long long)errors, (unsigned long long)misses, (unsigned long long)unfinished,
           100 * (client1 - client0) / wall, server_cpu, machine_cpu);
    return 0;
}
