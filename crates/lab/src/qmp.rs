//! Just enough of QEMU's machine protocol (QMP) to find vCPU threads and,
//! when a guest hangs, to ask its kernel where it is (magic SysRq keys).

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
        self.execute_with(command, json!({}))
    }

    /// Runs a command with `arguments` and returns its "return" value.
    pub fn execute_with(&mut self, command: &str, arguments: Value) -> Result<Value, QmpError> {
        writeln!(
            self.writer,
            "{}",
            json!({ "execute": command, "arguments": arguments })
        )?;
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

    /// Presses Alt+SysRq+`key` on the guest's PS/2 keyboard: the kernel's
    /// magic SysRq, which the lab's guests allow in full
    /// (`sysrq_always_enabled`). An upper-case key is pressed with Shift
    /// (sched_ext's state dump is 'D', 'd' another one).
    pub fn send_sysrq(&mut self, key: char) -> Result<(), QmpError> {
        self.execute_with("send-key", json!({ "keys": sysrq_keys(key) }))?;
        Ok(())
    }

    /// How long a command's answer may take from now on (the connection
    /// starts with `connect`'s timeout).
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<(), QmpError> {
        self.writer.set_read_timeout(Some(timeout))?;
        Ok(())
    }

    /// The text of a human monitor command (`info registers -a`).
    pub fn human(&mut self, command_line: &str) -> Result<String, QmpError> {
        let out = self.execute_with(
            "human-monitor-command",
            json!({ "command-line": command_line }),
        )?;
        Ok(out.as_str().unwrap_or_default().to_string())
    }
}

/// The keys `send-key` holds down together for SysRq+`key`.
fn sysrq_keys(key: char) -> Vec<Value> {
    let qcode = |k: &str| json!({ "type": "qcode", "data": k });
    let mut keys = vec![qcode("alt"), qcode("sysrq")];
    if key.is_ascii_uppercase() {
        keys.push(qcode("shift"));
    }
    keys.push(qcode(&key.to_ascii_lowercase().to_string()));
    keys
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

    #[test]
    fn sysrq_keys_hold_alt_sysrq_and_shift_for_upper_case() {
        let data = |k: char| -> Vec<String> {
            sysrq_keys(k)
                .iter()
                .map(|v| v["data"].as_str().unwrap().to_string())
                .collect()
        };
        assert_eq!(data('l'), ["alt", "sysrq", "l"]);
        assert_eq!(data('D'), ["alt", "sysrq", "shift", "d"]);
        assert_eq!(data('7'), ["alt", "sysrq", "7"]);
    }
}
