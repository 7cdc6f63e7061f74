//! The daemon's status socket: a Unix socket, readable by root only. A
//! client writes one request line ("status", or "history" for the recent
//! past `vsched status --plot` draws; nothing at all counts as "status"),
//! gets one JSON document and the connection is closed. `vsched status`
//! is its client.
//!
//! One socket means one daemon: binding finds a socket that answers and
//! refuses (another daemon runs), or one that does not (a daemon that was
//! killed left it) and replaces it.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the daemon listens unless told otherwise (/run: cleared at boot,
/// root's).
pub const DEFAULT_SOCKET: &str = "/run/vsched/daemon.sock";
/// Root only: the status names the machine's vCPUs and the daemon's pid.
const SOCKET_MODE: u32 = 0o600;
/// A client that does not read its answer within this is dropped.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// A client that sends no request line within this gets the status (a
/// person with `socat` who types nothing); `vsched status` always sends
/// one at once.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);
/// Longer requests are cut: the known ones are a word.
const MAX_REQUEST: u64 = 64;

#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    #[error("a vsched daemon is already running (its socket {0} answers)")]
    AlreadyRunning(PathBuf),
    #[error("cannot create {path}")]
    Create {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "no vsched daemon is running (nothing answers at {0}); start one with `vsched daemon`"
    )]
    NotRunning(PathBuf),
    #[error("cannot talk to the daemon at {path}")]
    Talk {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The bound socket; dropping it removes the file.
pub struct StatusSocket {
    listener: UnixListener,
    path: PathBuf,
}

impl StatusSocket {
    /// Binds `path` (creating its directory), replacing a stale socket and
    /// refusing a live one.
    pub fn bind(path: &Path) -> Result<StatusSocket, StatusError> {
        let create = |source| StatusError::Create {
            path: path.to_path_buf(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(create)?;
        }
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(StatusError::AlreadyRunning(path.to_path_buf()));
            }
            // Nobody answers: a killed daemon's leftover.
            std::fs::remove_file(path).map_err(create)?;
        }
        let listener = UnixListener::bind(path).map_err(create)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(SOCKET_MODE))
            .map_err(create)?;
        Ok(StatusSocket {
            listener,
            path: path.to_path_buf(),
        })
    }

    /// Answers every connection with `render(request)` until accepting
    /// fails; `request` is the client's first line, trimmed ("" if none).
    pub fn serve(&self, render: &dyn Fn(&str) -> String) {
        for stream in self.listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let _ = s.set_read_timeout(Some(REQUEST_TIMEOUT));
            let _ = s.set_write_timeout(Some(CLIENT_TIMEOUT));
            let mut request = Vec::new();
            // The client sends one line and waits: reading ahead of it
            // takes nothing from it.
            let _ = BufReader::new((&mut s).take(MAX_REQUEST)).read_until(b'\n', &mut request);
            let request = String::from_utf8_lossy(&request);
            // A client that goes away only loses its own answer.
            let _ = s.write_all(render(request.trim()).as_bytes());
        }
    }
}

impl Drop for StatusSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The daemon's answer to `request` ("status", "history") from its socket
/// at `path`.
pub fn fetch(path: &Path, request: &str) -> Result<String, StatusError> {
    let mut s = UnixStream::connect(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused => {
            StatusError::NotRunning(path.to_path_buf())
        }
        _ => StatusError::Talk {
            path: path.to_path_buf(),
            source: e,
        },
    })?;
    let talk = |source| StatusError::Talk {
        path: path.to_path_buf(),
        source,
    };
    s.set_read_timeout(Some(CLIENT_TIMEOUT)).map_err(talk)?;
    s.write_all(format!("{request}\n").as_bytes())
        .map_err(talk)?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(talk)?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("vsched-status-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        dir.join("daemon.sock")
    }

    #[test]
    fn a_client_gets_the_status_and_a_second_daemon_is_refused() {
        let path = scratch("live");
        let socket = std::sync::Arc::new(StatusSocket::bind(&path).unwrap());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, SOCKET_MODE);
        let serving = std::sync::Arc::clone(&socket);
        std::thread::spawn(move || {
            serving.serve(&|request| format!("{{\"asked\":\"{request}\"}}"))
        });
        assert_eq!(fetch(&path, "status").unwrap(), "{\"asked\":\"status\"}");
        assert_eq!(fetch(&path, "history").unwrap(), "{\"asked\":\"history\"}");
        // A client that sends nothing gets an answer to "" after the
        // request timeout.
        let mut quiet = UnixStream::connect(&path).unwrap();
        let mut text = String::new();
        quiet.read_to_string(&mut text).unwrap();
        assert_eq!(text, "{\"asked\":\"\"}");
        assert!(matches!(
            StatusSocket::bind(&path),
            Err(StatusError::AlreadyRunning(_))
        ));
    }

    #[test]
    fn a_killed_daemons_socket_is_replaced_and_no_daemon_is_said_plainly() {
        let path = scratch("stale");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        // A socket file nobody listens on, as SIGKILL leaves it.
        drop(UnixListener::bind(&path).unwrap());
        assert!(path.exists());
        assert!(matches!(
            fetch(&path, "status"),
            Err(StatusError::NotRunning(_))
        ));
        let socket = StatusSocket::bind(&path).unwrap();
        drop(socket);
        assert!(!path.exists(), "removed on drop");
        assert!(matches!(
            fetch(&path, "status"),
            Err(StatusError::NotRunning(_))
        ));
    }
}
