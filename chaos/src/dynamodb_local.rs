//! DynamoDB Local as the suite's DynamoDB, with its tables on disk (`-sharedDb -dbPath`), so the
//! "emulator restart" of a run is real for DynamoDB: the process is stopped (SIGTERM) during the
//! outage and started again on the same files and port; the status, suppression, control and
//! letter-index tables survive it as they would an AWS-side failover. SQS and S3 stay on the
//! harness's emulator (their outage is the proxy's refusal).
//!
//! The SDK reads per-service endpoints (`AWS_ENDPOINT_URL_DYNAMODB`) from the environment when
//! a client is configured, so `courier-chaos --dynamodb-local JAR` picks a port and runs itself
//! again with that variable set (see `main.rs`); that inner run owns the process.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// One DynamoDB Local server on a fixed port and database directory.
pub struct DynamoDbLocal {
    pub jar: PathBuf,
    pub db_path: PathBuf,
    pub port: u16,
    pub log: PathBuf,
    /// The harness's adoption file (servers it stops at exit), if any.
    pub adopt: Option<PathBuf>,
    child: Option<std::process::Child>,
}

/// Environment variables of the inner run.
pub const ENV_JAR: &str = "COURIER_CHAOS_DYNAMODB_JAR";
pub const ENV_PORT: &str = "COURIER_CHAOS_DYNAMODB_PORT";

impl DynamoDbLocal {
    /// The inner run's server, from its environment; `None` when not asked for.
    pub fn from_env(work_dir: &std::path::Path) -> Option<DynamoDbLocal> {
        let jar = PathBuf::from(std::env::var(ENV_JAR).ok()?);
        let port = std::env::var(ENV_PORT).ok()?.parse().ok()?;
        Some(DynamoDbLocal {
            jar,
            db_path: work_dir.join("dynamodb"),
            port,
            log: work_dir.join("dynamodb-local.log"),
            adopt: std::env::var("COURIER_HARNESS_ADOPT")
                .ok()
                .map(PathBuf::from),
            child: None,
        })
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Starts the server and waits until it accepts connections (30 s at most).
    pub fn start(&mut self) -> std::io::Result<Duration> {
        let started = Instant::now();
        std::fs::create_dir_all(&self.db_path)?;
        let lib = self
            .jar
            .parent()
            .map(|d| d.join("DynamoDBLocal_lib"))
            .unwrap_or_default();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let child = std::process::Command::new("java")
            .arg("-Xmx512m")
            .arg(format!("-Djava.library.path={}", lib.display()))
            .arg("-jar")
            .arg(&self.jar)
            .arg("-sharedDb")
            .arg("-dbPath")
            .arg(&self.db_path)
            .arg("-port")
            .arg(self.port.to_string())
            .stdin(std::process::Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()?;
        if let Some(adopt) = &self.adopt {
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(adopt)?;
            f.write_all(format!("dynamodb-local {}\n", child.id()).as_bytes())?;
        }
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(started.elapsed());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Err(std::io::Error::other(format!(
            "DynamoDB Local did not listen on {} within 30 s (see {})",
            self.port,
            self.log.display()
        )))
    }

    /// Stops the server (SIGTERM, then SIGKILL after 10 s) and waits for it.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for DynamoDbLocal {
    fn drop(&mut self) {
        self.stop();
    }
}
