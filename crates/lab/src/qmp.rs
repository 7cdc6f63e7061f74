//! Just enough of QEMU's machine protocol (QMP) to find vCPU threads.

use crate::error::QmpError;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Qmp {
    /// Connects (retrying while QEMU creates the socket) and negotiates.
    pub fn connect(socket: &Path, timeout: Duration) -> Result<Qmp, QmpError> {
        let deadline = Instant::now() + timeout;
        let stream = loop {
            match UnixStream::connect(socket) {
                Ok(s) => break s,
                // QEMU creates the socket shortly after it starts.
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(source) => {
                    return Err(QmpError::Connect {
                        socket: socket.to_path_buf(),
                        source,
                    })
                }
            }
        };
        stream.set_read_timeout(Some(timeout))?;
        let mut qmp = Qmp {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
        };
        let greeting = qmp.read_message()?;
        if greeting.get("QMP").is_none() {
            return Err(QmpError::Greeting(greeting.to_string()));
        }
        qmp.execute("qmp_capabilities")?;
        Ok(qmp)
    }

    fn read_message(&mut self) -> Result<Value, QmpError> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(QmpError::Closed);
        }
        Ok(serde_json::from_str(&line)?)
    }

    /// Runs a command and returns its "return" value (skipping events).
    pub fn execute(&mut self, command: &str) -> Result<Value, QmpError> {
        writeln!(self.writer, "{}", json!({ "execute": command }))?;
        loop {
            let msg = self.read_message()?;
            if let Some(ret) = msg.get("return") {
                return Ok(ret.clone());
            }
            if let Some(err) = msg.get("error") {
                return Err(QmpError::Command {
                    command: command.to_string(),
                    error: err.to_string(),
                });
            }
        }
    }

    /// Host thread id of each vCPU, indexed by vCPU number.
    pub fn vcpu_threads(&mut self) -> Result<Vec<i32>, QmpError> {
        let cpus = self.execute("query-cpus-fast")?;
        parse_vcpu_threads(&cpus)
    }
}

pub fn parse_vcpu_threads(cpus: &Value) -> Result<Vec<i32>, QmpError> {
    let list = cpus
        .as_array()
        .ok_or(QmpError::Reply("did not return a list"))?;
    let mut threads = vec![0; list.len()];
    for c in list {
        let idx = c["cpu-index"]
            .as_u64()
            .ok_or(QmpError::Reply("cpu-index missing"))? as usize;
        let tid = c["thread-id"]
            .as_i64()
            .ok_or(QmpError::Reply("thread-id missing"))? as i32;
        *threads
            .get_mut(idx)
            .ok_or(QmpError::Reply("cpu-index out of range"))? = tid;
    }
    Ok(threads)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_query_cpus_fast() {
        let v = json!([
            {"cpu-index": 1, "thread-id": 2002, "qom-path": "/machine/unattached/device[1]", "target": "x86_64"},
            {"cpu-index": 0, "thread-id": 2001, "qom-path": "/machine/unattached/device[0]", "target": "x86_64"}
        ]);
        assert_eq!(parse_vcpu_threads(&v).unwrap(), vec![2001, 2002]);
        assert!(parse_vcpu_threads(&json!({})).is_err());
    }
}
