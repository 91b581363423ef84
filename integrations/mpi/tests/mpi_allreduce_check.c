/* mpi_allreduce_check.c — a plain MPI program (no SwitchML code) for the interposer tests.
 *
 * Usage: mpirun -np N mpi_allreduce_check RESULT_FILE FLOAT_TOLERANCE
 *        mpirun -np N mpi_allreduce_check --error-mode
 *        mpirun -np N mpi_allreduce_check --failover RESULT_FILE SEED KILL_AT MARKER ACK [MODE [FLOAT_TOLERANCE]]
 *        mpirun -np N mpi_allreduce_check --rejoin DIR return|stay
 *
 * Issues a fixed sequence of all-reduce calls: some the interposer routes through SwitchML
 * (MPI_SUM on MPI_FLOAT / MPI_INT over MPI_COMM_WORLD, in place and not, blocking and
 * MPI_Iallreduce), and some it must pass to PMPI (MPI_DOUBLE, MPI_MAX, a communicator other
 * than MPI_COMM_WORLD, count 0). Every rank checks every result against the exact sum it
 * computes itself: int and double exactly, float within FLOAT_TOLERANCE (0 without the
 * interposer: these float sums are exact in float32). Rank 0 writes all results to
 * RESULT_FILE, one "call type value" line per element, for mpi_result_compare.
 * Exit status 0 only if every element on every rank is right.
 *
 * --error-mode (only meaningful with the interposer and N >= 2): with MPI_ERRORS_RETURN, rank 1
 * passes a NaN to a routed float MPI_Iallreduce, which SwitchML cannot quantize: rank 1's call
 * must fail at once, the other ranks' MPI_Wait must return an error (the rejected call fails on
 * every rank, in its first round trip); then a routed MPI_Allreduce must give the exact sum on
 * every rank (the rejection shifted nothing) and a PMPI call must still work.
 * Exit status 0 iff all of that holds on every rank.
 *
 * --failover (the interposer's failover test; also run without the interposer as the baseline):
 * 100 routed-eligible MPI_INT (or MPI_FLOAT) MPI_SUM calls on MPI_COMM_WORLD, 1 to 70000 elements, in place or
 * not from SEED; every rank checks every element exactly and rank 0 writes them to RESULT_FILE.
 * Before call KILL_AT (after the last call if KILL_AT >= 100) rank 0 creates MARKER, at which
 * the test script kills the switch, and (unless MODE contains "nowait") waits until the script
 * creates ACK (the switch is gone; at most 120 s, then it goes on anyway, saying so); with
 * "nowait" it sleeps 5 ms before each later call (the kill then tends to land among them). MODE
 * "barrier": all ranks call MPI_Barrier before call KILL_AT (rank 0 after the kill), so ranks
 * 1..N-1 wait in the barrier while rank 0 waits for the kill. MODE "async": pairs of calls are
 * MPI_Iallreduce + MPI_Waitall, single ones MPI_Iallreduce + MPI_Wait, every third call. MODE
 * "mixed" (with "async"): ranks other than 0 set SWITCHML_MPI_COMPLETION=inline before MPI_Init
 * (their rank from OMPI_COMM_WORLD_RANK or PMI_RANK), so their MPI_Iallreduce blocks: when the
 * switch dies before a pair, they fail in its first call before submitting the second, which
 * rank 0 (async) has submitted: the interposer must run that one again on MPI (RunOnHost).
 * Ends with a pass-through MPI_Allreduce of the error count (MPI_LONG). Exit status 0 iff all
 * are exact.
 *
 * --rejoin (the interposer's return to the switch; handshake files in DIR with the test script):
 * routed-eligible MPI_INT MPI_SUM calls on MPI_COMM_WORLD (1 to 70000 elements, some in place,
 * every fourth an MPI_Iallreduce + MPI_Wait), each checked exactly on every rank: 10 calls;
 * MPI_Barrier; rank 0 creates DIR/kill and waits for DIR/killed (the script killed the switch);
 * MPI_Barrier; 10 calls (the first fails over); MPI_Barrier; rank 0 creates DIR/restart (the
 * script starts the switch again on the same controller port, then creates DIR/restarted, which
 * rank 0 waits for in MODE stay only); MPI_Barrier; then rounds of MPI_Iallreduce, MPI_Barrier
 * (where the interposer polls its return; on MPI's all-reduce with the round's host-path request
 * outstanding across it), MPI_Wait, until rank 0 finds
 * DIR/returned (the script saw every rank's return line; MODE "return") or after 10 rounds 100 ms
 * apart (MODE "stay"); rank 0 tells the others with MPI_Bcast; then 10 calls; MODE return then
 * also: MPI_Barrier; rank 0 creates DIR/kill2 and waits for DIR/killed2 (the script killed the
 * restarted switch); MPI_Barrier; 10 calls (the first fails over again). Rank 0 prints
 * "mpi_allreduce_check --rejoin: N ranks, C calls, R rounds, W wrong elements". Rank 0 gives up
 * waiting for a file after 120 s (hang guard; exit status 1). Exit status 0 iff all are exact.
 *
 * The call sequence (the test script expects these counts; keep them in sync):
 *   routed MPI_Allreduce: 4     routed MPI_Iallreduce: 3   (with SWITCHML_MPI_MIN_ELEMENTS <= 1)
 *   PMPI MPI_Allreduce:   5     PMPI MPI_Iallreduce:   2   (the last is the MPI_LONG error count)
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int g_rank, g_size;
static double g_float_tol;
static long g_wrong;
static FILE* g_out;

/* Inputs: float values are multiples of 1/8 in [-125, 125] (so |x| < 2^7 and every partial
 * sum over <= 256 ranks is exact in float32); ints lie in [-1000, 1000]. */
static float FloatInput(int rank, long i) { return (float)(((rank + 1) * 7919L + i * 31L) % 2001 - 1000) / 8.0f; }
static int IntInput(int rank, long i) { return (int)(((rank + 1) * 104729L + i * 17L) % 2001 - 1000); }
static double DoubleInput(int rank, long i) { return (rank + 1) * 0.25 + (double)i; }

static double FloatSum(long i) {
  double s = 0;
  for (int r = 0; r < g_size; ++r) s += FloatInput(r, i);
  return s;
}
static long long IntSum(long i) {
  long long s = 0;
  for (int r = 0; r < g_size; ++r) s += IntInput(r, i);
  return s;
}
static long long IntMax(long i) {
  long long m = IntInput(0, i);
  for (int r = 1; r < g_size; ++r) if (IntInput(r, i) > m) m = IntInput(r, i);
  return m;
}
static double DoubleSum(long i) {
  double s = 0;
  for (int r = 0; r < g_size; ++r) s += DoubleInput(r, i);
  return s;
}

static void Wrong(const char* call, long i, double got, double want) {
  if (g_wrong++ < 5) {
    fprintf(stderr, "rank %d: %s element %ld: got %.9g, want %.9g\n", g_rank, call, i, got, want);
  }
}

static void CheckFloat(const char* call, const float* y, long n) {
  for (long i = 0; i < n; ++i) {
    double want = FloatSum(i);
    if (!(fabs((double)y[i] - want) <= g_float_tol)) Wrong(call, i, y[i], want);
    if (g_out) fprintf(g_out, "%s float %.9g\n", call, (double)y[i]);
  }
}
static void CheckInt(const char* call, const int* y, long n, int is_max) {
  for (long i = 0; i < n; ++i) {
    long long want = is_max ? IntMax(i) : IntSum(i);
    if (y[i] != want) Wrong(call, i, y[i], (double)want);
    if (g_out) fprintf(g_out, "%s int %d\n", call, y[i]);
  }
}
static void CheckDouble(const char* call, const double* y, long n) {
  for (long i = 0; i < n; ++i) {
    if (y[i] != DoubleSum(i)) Wrong(call, i, y[i], DoubleSum(i));
    if (g_out) fprintf(g_out, "%s double %.17g\n", call, y[i]);
  }
}

static void* Alloc(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (!p) { fprintf(stderr, "out of memory\n"); MPI_Abort(MPI_COMM_WORLD, 2); }
  return p;
}

static void Must(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    fprintf(stderr, "rank %d: %s returned %d\n", g_rank, what, rc);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
}

static int ErrorMode(void) {
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  /* 1. Routed MPI_Iallreduce, NaN on rank 1: rank 1's call fails at once; on the others the
   *    call fails too: usually through the request's MPI_Wait (the asynchronous error path),
   *    or at once when the switch's verdict is already in by the time MPI_Iallreduce looks
   *    (a fast network: MPI allows the error at either point, so both count). */
  long n = 1000;
  float* x = Alloc(n * sizeof(float));
  for (long i = 0; i < n; ++i) x[i] = FloatInput(g_rank, i);
  if (g_rank == 1) x[5] = NAN;
  MPI_Request req = MPI_REQUEST_NULL;
  int rc1 = MPI_Iallreduce(MPI_IN_PLACE, x, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
  int rc2 = rc1 == MPI_SUCCESS ? MPI_Wait(&req, MPI_STATUS_IGNORE) : rc1;
  int async_ok = g_rank == 1 ? rc1 != MPI_SUCCESS : rc2 != MPI_SUCCESS;
  /* 2. A later routed MPI_Allreduce gives the exact sum on every rank. */
  int y[16];
  for (int i = 0; i < 16; ++i) y[i] = IntInput(g_rank, i);
  int rc3 = MPI_Allreduce(MPI_IN_PLACE, y, 16, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  int y_exact = 1;
  for (int i = 0; i < 16; ++i) {
    long long want = 0;
    for (int r = 0; r < g_size; ++r) want += IntInput(r, i);
    if (y[i] != (int)want) y_exact = 0;
  }
  /* 3. PMPI calls still work. */
  double d = 1.0, dsum = 0.0;
  int rc4 = MPI_Allreduce(&d, &dsum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  int ok = async_ok && rc3 == MPI_SUCCESS && y_exact && rc4 == MPI_SUCCESS && dsum == g_size;
  printf("rank %d error mode: MPI_Iallreduce rc=%d MPI_Wait rc=%d MPI_Allreduce rc=%d exact=%d PMPI double rc=%d -> %s\n",
         g_rank, rc1, rc2, rc3, y_exact, rc4, ok ? "ok" : "WRONG");
  fflush(stdout);
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  free(x);
  MPI_Finalize();
  return all_ok ? 0 : 1;
}

/* --failover: see the header comment. */
static unsigned long long Mix(unsigned long long x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
static int FailoverInput(int rank, int call, long i) {
  return (int)(((rank + 1) * 104729L + i * 17L + call * 7919L) % 2001 - 1000);
}

static void KillPoint(const char* marker, const char* ack, int wait) {
  FILE* f = fopen(marker, "w");
  if (!f) { perror(marker); MPI_Abort(MPI_COMM_WORLD, 2); }
  fclose(f);
  if (!wait) return;
  for (int i = 0; i < 120 * 20; ++i) {
    if (access(ack, F_OK) == 0) return;
    usleep(50 * 1000);
  }
  fprintf(stderr, "rank 0: no %s after 120 s; going on\n", ack);
}

static int FailoverMode(int argc, char** argv) {
  const char* result = argv[2];
  unsigned long long seed = strtoull(argv[3], NULL, 10);
  int kill_at = atoi(argv[4]);
  const char* marker = argv[5];
  const char* ack = argv[6];
  const char* mode = argc > 7 ? argv[7] : "";
  g_float_tol = argc > 8 ? atof(argv[8]) : 0.0;
  const int wait = strstr(mode, "nowait") == NULL;
  const int barrier = strstr(mode, "barrier") != NULL;
  const int async = strstr(mode, "async") != NULL;
  const int fl = strstr(mode, "float") != NULL;
  const MPI_Datatype type = fl ? MPI_FLOAT : MPI_INT;
  if (strstr(mode, "mixed") != NULL) {
    const char* r = getenv("OMPI_COMM_WORLD_RANK");
    if (r == NULL) r = getenv("PMI_RANK");
    if (r == NULL) { fprintf(stderr, "mixed mode: no OMPI_COMM_WORLD_RANK or PMI_RANK\n"); return 2; }
    if (atoi(r) != 0) setenv("SWITCHML_MPI_COMPLETION", "inline", 1);
  }
  enum { kCalls = 100 };
  static const long kSizes[] = {1, 64, 300, 1000, 2500};  /* and 1 in 12: 70000 (> one window) */
  Must(MPI_Init(&argc, &argv), "MPI_Init");
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  if (g_rank == 0) {
    g_out = fopen(result, "w");
    if (!g_out) { perror(result); MPI_Abort(MPI_COMM_WORLD, 2); }
  }
  /* int: FailoverInput; float: the same / 8 (multiples of 1/8 in [-125, 125], as FloatInput). */
  long n[kCalls];
  int in_place[kCalls];
  int* x[kCalls];  /* 4-byte elements: int, or float through the union below */
  int* y[kCalls];
  for (int c = 0; c < kCalls; ++c) {
    unsigned long long h = Mix(seed * 1000 + (unsigned long long)c);
    n[c] = h % 12 == 11 ? 70000 : kSizes[h % 5];
    in_place[c] = (h >> 8) % 3 == 0;
    x[c] = Alloc(n[c] * 4);
    y[c] = Alloc(n[c] * 4);
    for (long i = 0; i < n[c]; ++i) {
      if (fl) ((float*)x[c])[i] = (float)FailoverInput(g_rank, c, i) / 8.0f;
      else x[c][i] = FailoverInput(g_rank, c, i);
    }
    if (in_place[c]) memcpy(y[c], x[c], n[c] * 4);
  }
  for (int c = 0; c < kCalls; ++c) {
    if (c == kill_at) {
      if (g_rank == 0) KillPoint(marker, ack, wait);
      if (barrier) Must(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    }
    /* nowait: rank 0 (so all ranks) goes on slowly, so that the kill usually lands among the
     * calls rather than after the last (either way the results must be exact). */
    if (!wait && c > kill_at && g_rank == 0) usleep(5000);
    const void* send = in_place[c] ? MPI_IN_PLACE : (const void*)x[c];
    if (async && c % 3 == 0) {
      /* Two outstanding requests when the next call is not the kill point. */
      const int pair = c + 1 < kCalls && c + 1 != kill_at;
      MPI_Request req[2];
      Must(MPI_Iallreduce(send, y[c], (int)n[c], type, MPI_SUM, MPI_COMM_WORLD, &req[0]), "MPI_Iallreduce");
      if (pair) {
        const void* send2 = in_place[c + 1] ? MPI_IN_PLACE : (const void*)x[c + 1];
        Must(MPI_Iallreduce(send2, y[c + 1], (int)n[c + 1], type, MPI_SUM, MPI_COMM_WORLD, &req[1]),
             "MPI_Iallreduce");
        MPI_Status st[2];
        Must(MPI_Waitall(2, req, st), "MPI_Waitall");
        ++c;
      } else {
        Must(MPI_Wait(&req[0], MPI_STATUS_IGNORE), "MPI_Wait");
      }
    } else {
      Must(MPI_Allreduce(send, y[c], (int)n[c], type, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
    }
  }
  if (kill_at >= kCalls) {
    if (g_rank == 0) KillPoint(marker, ack, wait);
    if (barrier) Must(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  }
  unsigned long long hash = 1469598103934665603ULL; /* FNV-1a over every result byte */
  for (int c = 0; c < kCalls; ++c) {
    char name[64];
    snprintf(name, sizeof name, "failover_call_%d_%ld%s", c, n[c], in_place[c] ? "_inplace" : "");
    const unsigned char* bytes = (const unsigned char*)y[c];
    for (long b = 0; b < n[c] * 4; ++b) hash = (hash ^ bytes[b]) * 1099511628211ULL;
    for (long i = 0; i < n[c]; ++i) {
      long long want = 0;
      for (int r = 0; r < g_size; ++r) want += FailoverInput(r, c, i);
      if (fl) {
        const float got = ((const float*)y[c])[i];
        if (!(fabs((double)got - (double)want / 8.0) <= g_float_tol)) Wrong(name, i, got, (double)want / 8.0);
        if (!in_place[c] && ((float*)x[c])[i] != (float)FailoverInput(g_rank, c, i) / 8.0f) {
          Wrong("failover_input_modified", i, ((float*)x[c])[i], 0);
          break;
        }
        if (g_out) fprintf(g_out, "%s float %.9g\n", name, (double)got);
      } else {
        if (y[c][i] != want) Wrong(name, i, y[c][i], (double)want);
        if (!in_place[c] && x[c][i] != FailoverInput(g_rank, c, i)) { Wrong("failover_input_modified", i, x[c][i], 0); break; }
        if (g_out) fprintf(g_out, "%s int %d\n", name, y[c][i]);
      }
    }
    free(x[c]);
    free(y[c]);
  }
  if (g_out) fclose(g_out);
  /* Every rank must hold the same bits (MPI_MAX / MPI_MIN: passed to PMPI). */
  unsigned long long hmax = 0, hmin = 0;
  MPI_Allreduce(&hash, &hmax, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&hash, &hmin, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  if (hmax != hmin) Wrong("results_differ_across_ranks", 0, 1, 0);
  long total_wrong = 0;
  MPI_Allreduce(&g_wrong, &total_wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD); /* PMPI: MPI_LONG */
  if (g_rank == 0) {
    printf("mpi_allreduce_check --failover: %d ranks, results %s on every rank, %ld wrong elements\n", g_size,
           hmax == hmin ? "identical" : "NOT identical", total_wrong);
  }
  MPI_Finalize();
  return total_wrong == 0 ? 0 : 1;
}

/* --rejoin: see the header comment. */
static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* Rank 0: creates DIR/ask, then waits for DIR/answer (at most 120 s; not with answer NULL).
 * Returns 0 on time-out. */
static int Handshake(const char* dir, const char* ask, const char* answer) {
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir, ask);
  FILE* f = fopen(path, "w");
  if (!f) { perror(path); MPI_Abort(MPI_COMM_WORLD, 2); }
  fclose(f);
  if (answer == NULL) return 1;
  snprintf(path, sizeof path, "%s/%s", dir, answer);
  for (int i = 0; i < 120 * 20; ++i) {
    if (access(path, F_OK) == 0) return 1;
    usleep(50 * 1000);
  }
  fprintf(stderr, "rank 0: no %s after 120 s\n", path);
  return 0;
}

/* Call k of --rejoin, started (MPI_Iallreduce: *req set) or run (MPI_Allreduce: *req null). */
struct RejoinCall {
  long n;
  int k, in_place;
  int *x, *y;
  MPI_Request req;
};
static void RejoinStart(struct RejoinCall* c, int k, int nonblocking) {
  static const long kSizes[] = {1, 300, 2500, 64, 70000};
  c->k = k;
  c->n = kSizes[k % 5];
  c->in_place = k % 3 == 0;
  c->x = Alloc(c->n * 4);
  c->y = Alloc(c->n * 4);
  for (long i = 0; i < c->n; ++i) c->x[i] = FailoverInput(g_rank, k, i);
  if (c->in_place) memcpy(c->y, c->x, c->n * 4);
  const void* send = c->in_place ? MPI_IN_PLACE : (const void*)c->x;
  c->req = MPI_REQUEST_NULL;
  if (nonblocking) {
    Must(MPI_Iallreduce(send, c->y, (int)c->n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &c->req), "MPI_Iallreduce");
  } else {
    Must(MPI_Allreduce(send, c->y, (int)c->n, MPI_INT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce");
  }
}
static void RejoinFinish(struct RejoinCall* c) {
  if (c->req != MPI_REQUEST_NULL) Must(MPI_Wait(&c->req, MPI_STATUS_IGNORE), "MPI_Wait");
  char name[64];
  snprintf(name, sizeof name, "rejoin_call_%d_%ld%s", c->k, c->n, c->in_place ? "_inplace" : "");
  for (long i = 0; i < c->n; ++i) {
    long long want = 0;
    for (int r = 0; r < g_size; ++r) want += FailoverInput(r, c->k, i);
    if (c->y[i] != want) Wrong(name, i, c->y[i], (double)want);
    if (!c->in_place && c->x[i] != FailoverInput(g_rank, c->k, i)) {
      Wrong("rejoin_input_modified", i, c->x[i], 0);
      break;
    }
  }
  free(c->x);
  free(c->y);
}

static int RejoinMode(int argc, char** argv) {
  const char* dir = argv[2];
  const int stay = strcmp(argv[3], "stay") == 0;
  if (!stay && strcmp(argv[3], "return") != 0) { fprintf(stderr, "--rejoin: MODE must be return or stay\n"); return 2; }
  Must(MPI_Init(&argc, &argv), "MPI_Init");
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  int k = 0, ok = 1;
  struct RejoinCall c;
  for (int phase = 0; phase < 2; ++phase) {
    for (int j = 0; j < 10; ++j, ++k) {
      RejoinStart(&c, k, k % 4 == 1);
      RejoinFinish(&c);
    }
    Must(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    /* MODE return: no wait for the restart, so the rounds below usually start on MPI's
     * all-reduce and poll with a host-path MPI_Iallreduce outstanding (the return itself too). */
    if (g_rank == 0) {
      ok &= phase == 0 ? Handshake(dir, "kill", "killed") : Handshake(dir, "restart", stay ? "restarted" : NULL);
    }
    Must(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
  }
  const double start = Now();
  int rounds = 0;
  for (;;) {
    RejoinStart(&c, k, 1);
    Must(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    RejoinFinish(&c);
    ++k;
    ++rounds;
    int flag = 0;
    if (g_rank == 0) {
      char path[4096];
      snprintf(path, sizeof path, "%s/returned", dir);
      flag = stay ? rounds >= 10 : access(path, F_OK) == 0;
      if (!flag && Now() - start > 120) {
        fprintf(stderr, "rank 0: no %s after 120 s\n", path);
        flag = 2;
        ok = 0;
      }
    }
    Must(MPI_Bcast(&flag, 1, MPI_INT, 0, MPI_COMM_WORLD), "MPI_Bcast");
    if (flag) break;
    usleep(stay ? 100 * 1000 : 20 * 1000);
  }
  for (int phase = 0; phase < (stay ? 1 : 2); ++phase) {
    if (phase == 1) {
      /* MODE return: the new switch killed too; the new failover takes every rank to MPI again. */
      Must(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
      if (g_rank == 0) ok &= Handshake(dir, "kill2", "killed2");
      Must(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier");
    }
    for (int j = 0; j < 10; ++j, ++k) {
      RejoinStart(&c, k, k % 4 == 1);
      RejoinFinish(&c);
    }
  }
  long total_wrong = 0;
  MPI_Allreduce(&g_wrong, &total_wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD); /* PMPI: MPI_LONG */
  if (g_rank == 0) {
    printf("mpi_allreduce_check --rejoin: %d ranks, %d calls, %d rounds, %ld wrong elements\n", g_size, k, rounds,
           total_wrong);
  }
  MPI_Finalize();
  return total_wrong == 0 && ok ? 0 : 1;
}

int main(int argc, char** argv) {
  if (argc >= 7 && strcmp(argv[1], "--failover") == 0) return FailoverMode(argc, argv);
  if (argc == 4 && strcmp(argv[1], "--rejoin") == 0) return RejoinMode(argc, argv);
  if (argc == 2 && strcmp(argv[1], "--error-mode") == 0) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    return ErrorMode();
  }
  if (argc != 3) {
    fprintf(stderr, "usage: %s RESULT_FILE FLOAT_TOLERANCE\n", argv[0]);
    return 2;
  }
  g_float_tol = atof(argv[2]);
  Must(MPI_Init(&argc, &argv), "MPI_Init");
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  if (g_rank == 0) {
    g_out = fopen(argv[1], "w");
    if (!g_out) { perror(argv[1]); MPI_Abort(MPI_COMM_WORLD, 2); }
  }

  /* 1. float, out of place, 1000 elements (several packets). */
  {
    long n = 1000;
    float* x = Alloc(n * sizeof(float));
    float* y = Alloc(n * sizeof(float));
    for (long i = 0; i < n; ++i) x[i] = FloatInput(g_rank, i);
    Must(MPI_Allreduce(x, y, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce float");
    for (long i = 0; i < n; ++i) {
      if (x[i] != FloatInput(g_rank, i)) { Wrong("float_oop_input_modified", i, x[i], FloatInput(g_rank, i)); break; }
    }
    CheckFloat("allreduce_float_oop", y, n);
    free(x); free(y);
  }
  /* 2. float, in place, 1 element. */
  {
    float v = FloatInput(g_rank, 0);
    Must(MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce float in place");
    CheckFloat("allreduce_float_inplace", &v, 1);
  }
  /* 3. int, out of place, 1000 elements. */
  {
    long n = 1000;
    int* x = Alloc(n * sizeof(int));
    int* y = Alloc(n * sizeof(int));
    for (long i = 0; i < n; ++i) x[i] = IntInput(g_rank, i);
    Must(MPI_Allreduce(x, y, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce int");
    CheckInt("allreduce_int_oop", y, n, 0);
    free(x); free(y);
  }
  /* 4. int, in place, 100003 elements (more than one window of 256 x 256). */
  {
    long n = 100003;
    int* y = Alloc(n * sizeof(int));
    for (long i = 0; i < n; ++i) y[i] = IntInput(g_rank, i);
    Must(MPI_Allreduce(MPI_IN_PLACE, y, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce int in place");
    CheckInt("allreduce_int_inplace", y, n, 0);
    free(y);
  }
  /* 5. MPI_Iallreduce float, out of place, 70000 elements, + MPI_Wait. */
  {
    long n = 70000;
    float* x = Alloc(n * sizeof(float));
    float* y = Alloc(n * sizeof(float));
    for (long i = 0; i < n; ++i) x[i] = FloatInput(g_rank, i);
    MPI_Request req;
    MPI_Status st;
    Must(MPI_Iallreduce(x, y, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req), "MPI_Iallreduce float");
    Must(MPI_Wait(&req, &st), "MPI_Wait");
    if (req != MPI_REQUEST_NULL) Wrong("iallreduce_request_not_null", 0, 1, 0);
    CheckFloat("iallreduce_float_oop", y, n);
    free(x); free(y);
  }
  /* 6. Two outstanding routed MPI_Iallreduce (int, in place, 257 elements each) and one passed
   *    to PMPI (MPI_DOUBLE); MPI_Test polls the first until it completes (its handle becomes
   *    MPI_REQUEST_NULL), then MPI_Waitall takes the mixed array with that null in it. */
  {
    long n = 257;
    int* a = Alloc(n * sizeof(int));
    int* b = Alloc(n * sizeof(int));
    double c[8];
    for (long i = 0; i < n; ++i) { a[i] = IntInput(g_rank, i); b[i] = IntInput(g_rank, i); }
    for (long i = 0; i < 8; ++i) c[i] = DoubleInput(g_rank, i);
    MPI_Request reqs[3];
    MPI_Status statuses[3];
    Must(MPI_Iallreduce(MPI_IN_PLACE, a, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &reqs[0]), "MPI_Iallreduce a");
    Must(MPI_Iallreduce(MPI_IN_PLACE, b, (int)n, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &reqs[1]), "MPI_Iallreduce b");
    Must(MPI_Iallreduce(MPI_IN_PLACE, c, 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &reqs[2]), "MPI_Iallreduce c");
    int flag = 0;
    while (!flag) Must(MPI_Test(&reqs[0], &flag, MPI_STATUS_IGNORE), "MPI_Test");
    if (reqs[0] != MPI_REQUEST_NULL) Wrong("test_request_not_null", 0, 1, 0);
    Must(MPI_Waitall(3, reqs, statuses), "MPI_Waitall");
    CheckInt("iallreduce_int_inplace_a", a, n, 0);
    CheckInt("iallreduce_int_inplace_b", b, n, 0);
    CheckDouble("iallreduce_double_mixed", c, 8);
    free(a); free(b);
  }
  /* 7. MPI_DOUBLE: passed to PMPI. */
  {
    long n = 100;
    double* x = Alloc(n * sizeof(double));
    double* y = Alloc(n * sizeof(double));
    for (long i = 0; i < n; ++i) x[i] = DoubleInput(g_rank, i);
    Must(MPI_Allreduce(x, y, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce double");
    CheckDouble("allreduce_double", y, n);
    free(x); free(y);
  }
  /* 8. MPI_Iallreduce MPI_DOUBLE in place: passed to PMPI. */
  {
    long n = 10;
    double y[10];
    for (long i = 0; i < n; ++i) y[i] = DoubleInput(g_rank, i);
    MPI_Request req;
    Must(MPI_Iallreduce(MPI_IN_PLACE, y, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req), "MPI_Iallreduce double");
    Must(MPI_Wait(&req, MPI_STATUS_IGNORE), "MPI_Wait double");
    CheckDouble("iallreduce_double", y, n);
  }
  /* 9. MPI_MAX on MPI_INT: passed to PMPI. */
  {
    long n = 50;
    int x[50], y[50];
    for (long i = 0; i < n; ++i) x[i] = IntInput(g_rank, i);
    Must(MPI_Allreduce(x, y, (int)n, MPI_INT, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce max");
    CheckInt("allreduce_int_max", y, n, 1);
  }
  /* 10. MPI_SUM on MPI_INT over a duplicate of MPI_COMM_WORLD: passed to PMPI. */
  {
    MPI_Comm dup;
    Must(MPI_Comm_dup(MPI_COMM_WORLD, &dup), "MPI_Comm_dup");
    long n = 64;
    int x[64], y[64];
    for (long i = 0; i < n; ++i) x[i] = IntInput(g_rank, i);
    Must(MPI_Allreduce(x, y, (int)n, MPI_INT, MPI_SUM, dup), "MPI_Allreduce dup comm");
    CheckInt("allreduce_int_dupcomm", y, n, 0);
    MPI_Comm_free(&dup);
  }
  /* 11. count 0: passed to PMPI. */
  {
    float x = 1.0f, y = 42.0f;
    Must(MPI_Allreduce(&x, &y, 0, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce count 0");
    if (y != 42.0f) Wrong("allreduce_count0_wrote_output", 0, y, 42.0);
  }

  if (g_out) fclose(g_out);
  long total_wrong = 0;
  MPI_Allreduce(&g_wrong, &total_wrong, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD); /* PMPI: MPI_LONG */
  if (g_rank == 0) printf("mpi_allreduce_check: %d ranks, %ld wrong elements\n", g_size, total_wrong);
  MPI_Finalize();
  return total_wrong == 0 ? 0 : 1;
}
