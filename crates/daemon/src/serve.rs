//! The metrics endpoint: a loopback HTTP/1.1 server that answers
//! `GET /metrics` with the current metrics and anything else with 404.
//! Scrapes are rare (every 15-60 s) and tiny, so one thread serving one
//! connection at a time is enough; an HTTP framework would be most of the
//! daemon's size for this.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// The OpenMetrics text format's content type (what Prometheus asks for).
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// A client that sends nothing for this long is dropped: one stuck
/// connection must not stop the next scrape.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(5);
/// Request lines and headers longer than this are refused (a scrape's are
/// under 1 KiB).
const MAX_REQUEST_BYTES: u64 = 16 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot accept connections")]
    Accept(#[source] std::io::Error),
}

/// Serves `render()` at /metrics on `listener` until accepting fails.
pub fn serve(listener: &TcpListener, render: &dyn Fn() -> String) -> Result<(), ServeError> {
    for stream in listener.incoming() {
        match stream {
            // A client that misbehaves only loses its own answer.
            Ok(s) => {
                let _ = answer(s, render);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ServeError::Accept(e)),
        }
    }
    Ok(())
}

fn answer(stream: TcpStream, render: &dyn Fn() -> String) -> std::io::Result<()> {
    stream.set_read_timeout(Some(CLIENT_TIMEOUT))?;
    stream.set_write_timeout(Some(CLIENT_TIMEOUT))?;
    let mut reader = BufReader::new((&stream).take(MAX_REQUEST_BYTES));
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    // Read the headers to their blank line; none matters here.
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header)? == 0 || header.trim().is_empty() {
            break;
        }
    }
    let (status, content_type, body) = respond(&request_line, render);
    let mut out = &stream;
    write!(
        out,
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    out.flush()
}

/// Status line, content type and body for a request line.
fn respond(
    request_line: &str,
    render: &dyn Fn() -> String,
) -> (&'static str, &'static str, String) {
    let mut parts = request_line.split_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target.split('?').next().unwrap_or("");
    match (method, path) {
        ("GET", "/metrics") => ("200 OK", CONTENT_TYPE, render()),
        ("GET", _) => (
            "404 Not Found",
            "text/plain; charset=utf-8",
            "vsched daemon: the metrics are at /metrics\n".into(),
        ),
        _ => (
            "405 Method Not Allowed",
            "text/plain; charset=utf-8",
            "vsched daemon: only GET\n".into(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_are_served_and_other_paths_refused() {
        let render = || "vsched_x 1\n# EOF\n".to_string();
        assert_eq!(respond("GET /metrics HTTP/1.1\r\n", &render).0, "200 OK");
        assert_eq!(
            respond("GET /metrics?x=1 HTTP/1.1\r\n", &render).0,
            "200 OK"
        );
        assert_eq!(respond("GET / HTTP/1.1\r\n", &render).0, "404 Not Found");
        assert_eq!(
            respond("POST /metrics HTTP/1.1\r\n", &render).0,
            "405 Method Not Allowed"
        );
    }

    #[test]
    fn a_scrape_over_loopback_gets_the_text() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || serve(&listener, &|| "vsched_x 1\n# EOF\n".to_string()));
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut reply = String::new();
        s.read_to_string(&mut reply).unwrap();
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
        assert!(reply.contains("openmetrics-text"), "{reply}");
        assert!(reply.ends_with("vsched_x 1\n# EOF\n"), "{reply}");
    }
}
