//! A real restart of the harness's Postfix: SIGTERM to its master (pid from the spool's
//! `pid/master.pid`), wait until the SMTP port is free, start a new master with the same
//! configuration, spool and Maildir, wait for its greeting. Mail Postfix had accepted but not
//! yet delivered stays in the spool and is delivered by the new master.
//!
//! The new master is started with `setsid` (its own process group) and recorded in the
//! harness's adoption file (`$COURIER_HARNESS_ADOPT`, "name pid" lines), so
//! `scripts/with-harness.sh` stops it at exit like the servers it started itself.

use std::io::{Read, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Why a restart failed.
#[derive(Debug, thiserror::Error)]
pub enum RestartError {
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0}")]
    Msg(String),
}

/// The harness's Postfix instance.
pub struct Postfix {
    pub conf: PathBuf,
    pub queue: PathBuf,
    pub port: u16,
    pub adopt: PathBuf,
    pub log: PathBuf,
    current: Option<std::process::Child>,
}

const MASTER: &str = "/usr/lib/postfix/sbin/master";

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        Err(_) => false,
    }
}

fn greets(port: u16) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect_timeout(
        &std::net::SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(2),
    ) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut buf = [0u8; 3];
    let ok = s.read_exact(&mut buf).is_ok() && &buf == b"220";
    let _ = s.write_all(b"QUIT\r\n");
    ok
}

impl Postfix {
    /// From the harness's environment (`COURIER_HARNESS_DIR`, `COURIER_SMTP_PORT`,
    /// `COURIER_POSTFIX_CONF`, `COURIER_HARNESS_ADOPT`).
    pub fn from_env() -> Option<Postfix> {
        let dir = PathBuf::from(std::env::var("COURIER_HARNESS_DIR").ok()?);
        let conf = std::env::var("COURIER_POSTFIX_CONF")
            .map(PathBuf::from)
            .unwrap_or_else(|_| dir.join("postfix/conf"));
        Some(Postfix {
            queue: dir.join("postfix/queue"),
            port: std::env::var("COURIER_SMTP_PORT").ok()?.parse().ok()?,
            adopt: PathBuf::from(std::env::var("COURIER_HARNESS_ADOPT").ok()?),
            log: dir.join("logs/postfix-master-chaos.log"),
            conf,
            current: None,
        })
    }

    fn master_pid(&self) -> Option<u32> {
        std::fs::read_to_string(self.queue.join("pid/master.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Stops and starts Postfix; returns how long SMTP was unavailable.
    pub fn restart(&mut self) -> Result<Duration, RestartError> {
        let started = Instant::now();
        let pid = self
            .master_pid()
            .ok_or_else(|| RestartError::Msg("no master.pid in the Postfix spool".into()))?;
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()?;
        if !status.success() {
            return Err(RestartError::Msg(format!("kill -TERM {pid} failed")));
        }
        if let Some(mut child) = self.current.take() {
            let _ = child.wait();
        }
        // The master and its daemons gone, and the port free.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let free = std::net::TcpListener::bind(("127.0.0.1", self.port)).is_ok();
            if !alive(pid) && free {
                break;
            }
            if Instant::now() > deadline {
                return Err(RestartError::Msg(format!(
                    "Postfix master {pid} or its port {} did not go away in 20 s",
                    self.port
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut tries = 0;
        loop {
            tries += 1;
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.log)?;
            let child = std::process::Command::new("setsid")
                .arg(MASTER)
                .arg("-d")
                .arg("-c")
                .arg(&self.conf)
                .stdin(std::process::Stdio::null())
                .stdout(log.try_clone()?)
                .stderr(log)
                .spawn()?;
            let pid = child.id();
            let mut adopt = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.adopt)?;
            adopt.write_all(format!("postfix-restarted {pid}\n").as_bytes())?;
            self.current = Some(child);
            let deadline = Instant::now() + Duration::from_secs(30);
            while Instant::now() < deadline && alive(pid) {
                if greets(self.port) {
                    return Ok(started.elapsed());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            if let Some(mut child) = self.current.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
            if tries >= 3 {
                return Err(RestartError::Msg(format!(
                    "Postfix did not come back after a restart (see {})",
                    self.log.display()
                )));
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// Files still in Postfix's queues (accepted, not yet delivered).
    pub fn queued(&self) -> usize {
        fn count(dir: &std::path::Path) -> usize {
            let Ok(entries) = std::fs::read_dir(dir) else {
                return 0;
            };
            entries
                .flatten()
                .map(|e| {
                    let path = e.path();
                    if path.is_dir() { count(&path) } else { 1 }
                })
                .sum()
        }
        ["maildrop", "incoming", "active", "deferred", "hold"]
            .iter()
            .map(|d| count(&self.queue.join(d)))
            .sum()
    }
}
