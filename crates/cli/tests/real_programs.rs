//! Programs nobody here wrote, from Debian's packages, under `vsched exec`:
//! each must give byte for byte the output and the exit status it gives
//! without vsched, at as many threads as vCPUs and at 4x as many, with the
//! runtime really loaded (its statistics file appears). Correctness only:
//! their speed is `vsched bench`'s business, never a test's.
//!
//! scripts/test.sh installs the programs (xz-utils, zstd, pigz, pbzip2,
//! sqlite3; libgomp comes with gcc).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const VSCHED: &str = env!("CARGO_BIN_EXE_vsched");

/// Input size: large enough that every compressor splits it among its
/// threads (xz's smallest multi-threaded block at -1 is 3 MiB; pigz and
/// pbzip2 cut 128 KiB and 900 KB blocks), small enough for a second or two.
const INPUT_BYTES: usize = 12 << 20;

/// The benchmark's generated text (the same bytes on every run).
fn input(dir: &Path) -> PathBuf {
    let path = dir.join("input.txt");
    vsched_bench::real::write_text(&path, INPUT_BYTES as u64).unwrap();
    path
}

fn require(program: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "{program} is not installed: scripts/test.sh installs it (apt-get install xz-utils zstd pigz pbzip2 sqlite3)"
    );
}

/// Runs `argv` plainly and under `vsched exec`; returns both outputs and
/// whether the runtime wrote its statistics (it was loaded).
fn both(
    dir: &Path,
    argv: &[&str],
    stdin: Option<&Path>,
    envs: &[(&str, &str)],
) -> (Output, Output, bool) {
    let run = |cmd: &mut Command| {
        if let Some(f) = stdin {
            cmd.stdin(std::fs::File::open(f).unwrap());
        }
        cmd.envs(envs.iter().copied());
        cmd.output()
            .unwrap_or_else(|e| panic!("running {argv:?}: {e}"))
    };
    let plain = run(Command::new(argv[0]).args(&argv[1..]));
    let tag = Path::new(argv[0])
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    // A name of its own per run: the loaded check must not find an earlier run's file.
    static RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let run_no = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tag = format!("stats-{tag}-{run_no}-");
    let stats = dir.join(format!("{tag}%p.json"));
    let with = run(Command::new(VSCHED)
        .args(["exec", "--stats-json"])
        .arg(&stats)
        .arg("--")
        .args(argv));
    let loaded = std::fs::read_dir(dir).unwrap().flatten().any(|e| {
        let name = e.file_name().to_string_lossy().into_owned();
        name.starts_with(&tag)
            && std::fs::read_to_string(e.path()).is_ok_and(|t| t.contains("vsched.sync-stats"))
    });
    (plain, with, loaded)
}

fn assert_same(what: &str, plain: &Output, with: &Output, loaded: bool) {
    assert!(
        loaded,
        "{what}: the runtime wrote no statistics (not preloaded?)"
    );
    assert_eq!(
        plain.status.code(),
        with.status.code(),
        "{what}: exit status"
    );
    assert!(
        plain.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&plain.stderr)
    );
    assert!(
        plain.stdout == with.stdout,
        "{what}: output differs under vsched exec ({} against {} bytes)",
        with.stdout.len(),
        plain.stdout.len()
    );
}

/// Thread counts to try: one per vCPU, and 4x oversubscribed.
fn thread_counts() -> [usize; 2] {
    let n = common::online_cpus().len().max(1);
    [n, 4 * n]
}

#[test]
fn compressors_give_the_same_bytes_under_vsched_exec() {
    let _guard = common::serial();
    let scratch = common::TempDir::new("real");
    let input = input(&scratch.0);
    let file = input.to_str().unwrap();
    for program in ["xz", "zstd", "pigz", "pbzip2"] {
        require(program);
    }
    for t in thread_counts() {
        let t = t.to_string();
        let pbzip2_threads = format!("-p{t}");
        let zstd_threads = format!("-T{t}");
        let cases: [(&str, Vec<&str>); 4] = [
            ("xz", vec!["xz", "-T", &t, "-1", "-c", file]),
            ("zstd", vec!["zstd", "-q", &zstd_threads, "-3", "-c", file]),
            ("pigz", vec!["pigz", "-p", &t, "-c", file]),
            ("pbzip2", vec!["pbzip2", &pbzip2_threads, "-c", file]),
        ];
        for (name, argv) in cases {
            let (plain, with, loaded) = both(&scratch.0, &argv, None, &[]);
            assert_same(&format!("{name} at {t} threads"), &plain, &with, loaded);
        }
    }
    // And back: decompressing under vsched gives the input again.
    let packed = scratch.0.join("input.xz");
    let out = Command::new("xz")
        .args(["-T2", "-1", "-c", file])
        .output()
        .unwrap();
    std::fs::write(&packed, &out.stdout).unwrap();
    let (plain, with, loaded) = both(
        &scratch.0,
        &["xz", "-T2", "-d", "-c", packed.to_str().unwrap()],
        None,
        &[],
    );
    assert_same("xz -d", &plain, &with, loaded);
    assert!(
        with.stdout == std::fs::read(&input).unwrap(),
        "xz -d under vsched: not the input"
    );
}

#[test]
fn sqlite_answers_the_same_under_vsched_exec() {
    let _guard = common::serial();
    require("sqlite3");
    let scratch = common::TempDir::new("real");
    let script = scratch.0.join("q.sql");
    std::fs::write(
        &script,
        "PRAGMA threads = 4;\n\
         CREATE TABLE t(k INTEGER, v TEXT);\n\
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 200000)\n\
         INSERT INTO t SELECT (i * 7919) % 100003, hex(i * 2654435761 % 4294967296) FROM n;\n\
         CREATE INDEX tk ON t(k);\n\
         SELECT count(*), sum(k), max(v) FROM t;\n\
         SELECT k, v FROM t ORDER BY v DESC, k LIMIT 5;\n\
         SELECT k % 10, count(*) FROM t GROUP BY 1 ORDER BY 1;\n",
    )
    .unwrap();
    let (plain, with, loaded) = both(&scratch.0, &["sqlite3", ":memory:"], Some(&script), &[]);
    assert_same("sqlite3", &plain, &with, loaded);
    assert!(
        plain.stdout.len() > 100,
        "sqlite3 printed little: {:?}",
        plain.stdout
    );
}

#[test]
fn an_openmp_program_computes_the_same_under_vsched_exec() {
    let _guard = common::serial();
    let scratch = common::TempDir::new("real");
    let exe = scratch.0.join("openmp_wait");
    let source = format!("{}/../bench/c/openmp_wait.c", env!("CARGO_MANIFEST_DIR"));
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let built = Command::new(&cc)
        .args(["-O2", "-fopenmp", "-o"])
        .arg(&exe)
        .arg(&source)
        .status()
        .unwrap_or_else(|e| panic!("running {cc}: {e}"));
    assert!(
        built.success(),
        "openmp_wait.c did not compile with -fopenmp"
    );
    let exe = exe.to_str().unwrap();
    for t in thread_counts() {
        // The program prints its time too: compare the checksum only.
        let checksum = |o: &Output| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            let v: serde_json::Value =
                serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{e}: {text}"));
            v["checksum"].as_f64().unwrap()
        };
        let threads = t.to_string();
        let (plain, with, loaded) = both(
            &scratch.0,
            &[exe, "200"],
            None,
            &[("OMP_NUM_THREADS", &threads)],
        );
        assert!(loaded, "openmp at {t} threads: the runtime was not loaded");
        assert!(
            plain.status.success() && with.status.success(),
            "openmp at {t} threads"
        );
        assert_eq!(checksum(&plain), checksum(&with), "openmp at {t} threads");
    }
}

/// `vsched bench real` end to end on tiny sizes: every row it asked for is
/// there with its pairs, the outputs matched, and bad options are refused
/// before anything runs. (Its timings are not judged here.)
#[test]
fn bench_real_runs_its_rows_and_refuses_bad_options() {
    let _guard = common::serial();
    require("sqlite3");
    let out = Command::new(VSCHED)
        .args(["bench", "real", "--only", "sqlite", "--only", "pigz"])
        .args([
            "--factor",
            "1",
            "--rounds",
            "2",
            "--input-mib",
            "1",
            "--json",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Exit 1 only says a goal was missed (tiny runs are noisy); 2 is an error.
    assert!(
        out.status.code().is_some_and(|c| c <= 1),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let rows = r["rows"].as_array().unwrap();
    let names: Vec<&str> = rows
        .iter()
        .map(|r| r["workload"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["pigz", "sqlite"], "{stdout}");
    for row in rows {
        assert_eq!(row["ratios"].as_array().unwrap().len(), 2, "{row}");
        assert_eq!(row["identical_output"], true, "{row}");
        assert!(row["median_ratio"].as_f64().unwrap() > 0.0, "{row}");
    }
    for bad in [
        &["--rounds", "0"][..],
        &["--factor", "0"],
        &["--input-mib", "0"],
        // A directory that cannot be created (a file is in the way).
        &["--plot", "/dev/null/plots"],
        &["--only", "nosuch"],
    ] {
        let out = Command::new(VSCHED)
            .args(["bench", "real"])
            .args(bad)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
        assert!(!out.stderr.is_empty(), "{bad:?} says why");
    }
}
