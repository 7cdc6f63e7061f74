//! End-to-end tests of `vsched exec`: the runtime is really preloaded and
//! used, the program's exit status passes through, the statistics arrive,
//! and bad input is refused with a clear message.

mod common;

use common::{vsched, TempDir};
use std::path::{Path, PathBuf};
use std::process::Command;

const VSCHED: &str = env!("CARGO_BIN_EXE_vsched");

/// Eight threads on a mutex and a condition-variable token ring: waits are
/// certain, and a wrong runtime shows up as a wrong total or a hang.
const PROGRAM: &str = r#"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static long counter, turn;
enum { THREADS = 8, ROUNDS = 2000 };
static void *worker(void *arg) {
    long me = (long)arg;
    for (int i = 0; i < ROUNDS; i++) {
        pthread_mutex_lock(&m);
        counter++;
        while (turn % THREADS != me) pthread_cond_wait(&c, &m);
        turn++;
        pthread_cond_broadcast(&c);
        pthread_mutex_unlock(&m);
    }
    return 0;
}
int main(void) {
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++) pthread_create(&t[i], 0, worker, (void *)i);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], 0);
    printf("loaded=%d counter=%ld turn=%ld\n", dlsym(RTLD_DEFAULT, "vsched_sync_version") != 0, counter, turn);
    return counter == THREADS * ROUNDS && turn == THREADS * ROUNDS ? 0 : 1;
}
"#;

/// Runs `cmd`, requires it to succeed, returns its stdout.
fn succeeds(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cmd:?} failed: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

fn build(dir: &Path, name: &str, source: &str) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    let bin = dir.join(name);
    std::fs::write(&src, source).unwrap();
    let status = Command::new("cc")
        .args(["-O2", "-pthread", "-o"])
        .arg(&bin)
        .arg(&src)
        .arg("-ldl")
        .status()
        .expect("running cc (apt-get install gcc)");
    assert!(status.success(), "cc failed");
    bin
}

/// Thousands of threads at once, all through a mutex, a barrier of all of
/// them and a broadcast: the runtime keeps no per-thread tables that could
/// run out.
const MANY_THREADS: &str = r#"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
enum { THREADS = 2000 };
static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static pthread_barrier_t b;
static long entered, released;
static int go;
static void *worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    entered++;
    pthread_mutex_unlock(&m);
    pthread_barrier_wait(&b);
    pthread_mutex_lock(&m);
    while (!go) pthread_cond_wait(&c, &m);
    released++;
    pthread_mutex_unlock(&m);
    return 0;
}
int main(void) {
    static pthread_t t[THREADS];
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    pthread_barrier_init(&b, 0, THREADS + 1);
    for (int i = 0; i < THREADS; i++)
        if (pthread_create(&t[i], &attr, worker, 0) != 0) { perror("pthread_create"); return 2; }
    pthread_barrier_wait(&b);
    pthread_mutex_lock(&m);
    go = 1;
    pthread_cond_broadcast(&c);
    pthread_mutex_unlock(&m);
    for (int i = 0; i < THREADS; i++) pthread_join(t[i], 0);
    printf("loaded=%d entered=%ld released=%ld\n", dlsym(RTLD_DEFAULT, "vsched_sync_version") != 0, entered, released);
    return entered == THREADS && released == THREADS ? 0 : 1;
}
"#;

#[test]
fn thousands_of_threads_synchronise() {
    common::sync_library();
    let dir = TempDir::new("many");
    let program = build(&dir.0, "many", MANY_THREADS);
    let stdout = succeeds(
        Command::new("timeout")
            .args(["120", VSCHED, "exec", "--"])
            .arg(&program),
    );
    assert!(
        stdout.contains("loaded=1 entered=2000 released=2000"),
        "{stdout}"
    );
}

#[test]
fn preloads_the_runtime_and_reports_its_statistics() {
    common::sync_library();
    let dir = TempDir::new("stats");
    let program = build(&dir.0, "ring", PROGRAM);
    let stats = dir.0.join("stats.json");
    let stdout = succeeds(
        Command::new(VSCHED)
            .arg("exec")
            .arg("--stats-json")
            .arg(&stats)
            .arg("--")
            .arg(&program),
    );
    assert!(
        stdout.contains("loaded=1 counter=16000 turn=16000"),
        "{stdout}"
    );

    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(json["schema"], "vsched.sync-stats");
    // Eight threads passing one token: most of them wait every round.
    assert!(json["counters"]["waits"].as_u64().unwrap() > 1000, "{json}");
    assert!(json["vcpus"].as_u64().unwrap() >= 1);

    // The same program without vsched runs on glibc's primitives.
    let plain = Command::new(&program).output().unwrap();
    assert!(String::from_utf8_lossy(&plain.stdout).contains("loaded=0"));
}

#[test]
fn passes_the_exit_status_through() {
    common::sync_library();
    let out = vsched(&["exec", "--spin-ns", "0", "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    let out = vsched(&["exec", "--", "sh", "-c", "kill -TERM $$"]);
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGTERM));
}

#[test]
fn prints_an_environment_that_preloads_the_runtime() {
    let lib = common::sync_library();
    let out = vsched(&["exec", "--print-env", "--spin-ns", "1234"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let lib = std::path::absolute(lib).unwrap();
    assert!(
        text.contains(&format!("LD_PRELOAD='{}'", lib.display())),
        "{text}"
    );
    assert!(text.contains("VSCHED_SYNC_SPIN_NS='1234'"), "{text}");
}

#[test]
fn refuses_bad_input_clearly() {
    common::sync_library();
    let cases: &[(&[&str], i32, &str)] = &[
        (&["exec"], 2, "PROGRAM"),
        (
            &["exec", "--", "/nonexistent/program"],
            127,
            "command not found",
        ),
        (
            &["exec", "--library", "/nonexistent.so", "--", "true"],
            2,
            "does not exist",
        ),
        (
            &["exec", "--spin-ns", "lots", "--", "true"],
            2,
            "invalid value",
        ),
    ];
    for (args, code, message) in cases {
        let out = vsched(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {stderr}");
        assert!(stderr.contains(message), "{args:?}: {stderr}");
    }
}

#[test]
fn warns_that_a_static_program_cannot_be_preloaded() {
    common::sync_library();
    let busybox = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .find(|p| Path::new(p).is_file());
    let Some(busybox) = busybox else {
        panic!("busybox-static is needed (scripts/test.sh installs it)");
    };
    let out = vsched(&["exec", "--spin-ns", "0", "--", busybox, "true"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("statically linked"));
}

#[test]
fn a_hand_preloaded_program_uses_the_last_measurement() {
    let lib = common::sync_library();
    let dir = TempDir::new("cache");
    succeeds(
        Command::new(VSCHED)
            .env("XDG_CACHE_HOME", &dir.0)
            .args(["exec", "--", "true"]),
    );
    let cached = std::fs::read_to_string(dir.0.join("vsched/sync-spin-ns")).unwrap();
    let measured: u64 = cached.trim().parse().unwrap();

    let stats = dir.0.join("stats.json");
    let out = Command::new("true")
        .env("XDG_CACHE_HOME", &dir.0)
        .env("LD_PRELOAD", &lib)
        .env("VSCHED_SYNC_STATS_JSON", &stats)
        .output()
        .unwrap();
    assert!(out.status.success());
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    assert_eq!(json["spin_ns"].as_u64(), Some(measured));
}

/// Measuring before every start cost 30-40 ms (4% of a one-second program
/// in `vsched bench real`): a fresh measurement is reused, --measure
/// takes a new one.
#[test]
fn a_fresh_measurement_is_reused_and_measure_takes_a_new_one() {
    let dir = TempDir::new("fresh");
    let file = dir.0.join("vsched/sync-spin-ns");
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    // A value no measurement gives (1 ns), written just now.
    std::fs::write(&file, "1\n").unwrap();
    let budget = |extra: &[&str]| {
        let out = Command::new(VSCHED)
            .env("XDG_CACHE_HOME", &dir.0)
            .arg("exec")
            .args(extra)
            .args(["--", "printenv", "VSCHED_SYNC_SPIN_NS"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(budget(&[]), "1");
    let measured = budget(&["--measure"]);
    assert_ne!(measured, "1");
    assert_eq!(std::fs::read_to_string(&file).unwrap().trim(), measured);
}

#[test]
fn refuses_a_library_path_that_ld_preload_would_split() {
    let lib = common::sync_library();
    let dir = TempDir::new("space");
    let spaced = dir.0.join("with space");
    std::fs::create_dir_all(&spaced).unwrap();
    let copy = spaced.join("libvsched_sync.so");
    std::fs::copy(&lib, &copy).unwrap();
    let out = Command::new(VSCHED)
        .arg("exec")
        .arg("--library")
        .arg(&copy)
        .args(["--spin-ns", "0", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("space or a colon"));
}
