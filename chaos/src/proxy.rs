//! A fault-injecting TCP proxy. It listens on 127.0.0.1 (a free port), forwards every
//! connection to one upstream address, and applies the current [`Fault`] to every chunk it
//! forwards, in both directions:
//!
//! - `Pass`: forward as is.
//! - `Latency(d)`: wait `d` before forwarding each chunk.
//! - `Reset(p)`: reset both connections (RST, zero linger) with probability `p` per chunk, so a
//!   request can be lost before the emulator saw it, or its response after it was applied.
//! - `Blackhole`: stop forwarding (read and drop); held connections are reset when the fault
//!   ends, so clients see a timeout-like stall followed by a reset.
//! - `Down`: the upstream is unreachable (a restarting server): new and open connections are
//!   reset at once.
//!
//! The fault is switched at any time with [`Proxy::set`]; open connections see the change at
//! their next chunk (or at once when blackholed).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::schedule::Rng;

/// What the proxy does to the traffic now.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fault {
    Pass,
    Latency(Duration),
    Reset(f64),
    Blackhole,
    Down,
}

impl Fault {
    pub fn label(&self) -> String {
        match self {
            Fault::Pass => "pass".into(),
            Fault::Latency(d) => format!("latency {} ms", d.as_millis()),
            Fault::Reset(p) => format!("resets p={p:.2}/chunk"),
            Fault::Blackhole => "blackhole".into(),
            Fault::Down => "down".into(),
        }
    }
}

/// Counts of what the proxy did.
#[derive(Debug, Default)]
pub struct ProxyStats {
    pub connections: AtomicU64,
    pub chunks: AtomicU64,
    pub resets: AtomicU64,
    pub blackholed: AtomicU64,
    pub refused: AtomicU64,
}

/// A running proxy.
pub struct Proxy {
    pub port: u16,
    fault: watch::Sender<Fault>,
    pub stats: Arc<ProxyStats>,
}

impl Proxy {
    /// Binds a free port on 127.0.0.1 and forwards to `upstream` (`host:port`).
    pub async fn start(upstream: String, seed: u64) -> std::io::Result<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let (fault, rx) = watch::channel(Fault::Pass);
        let stats = Arc::new(ProxyStats::default());
        let task_stats = Arc::clone(&stats);
        tokio::spawn(async move {
            let mut n = 0u64;
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                n += 1;
                let rx = rx.clone();
                let stats = Arc::clone(&task_stats);
                let upstream = upstream.clone();
                let rng = Rng::new(seed ^ n.wrapping_mul(0x9e37_79b9_7f4a_7c15));
                tokio::spawn(async move {
                    stats.connections.fetch_add(1, Ordering::Relaxed);
                    connection(client, upstream, rx, stats, rng).await;
                });
            }
        });
        Ok(Proxy { port, fault, stats })
    }

    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }

    pub fn fault(&self) -> Fault {
        *self.fault.borrow()
    }
}

fn reset(a: &TcpStream, b: Option<&TcpStream>) {
    let _ = a.set_zero_linger();
    if let Some(b) = b {
        let _ = b.set_zero_linger();
    }
}

async fn connection(
    client: TcpStream,
    upstream: String,
    mut rx: watch::Receiver<Fault>,
    stats: Arc<ProxyStats>,
    mut rng: Rng,
) {
    if *rx.borrow() == Fault::Down {
        stats.refused.fetch_add(1, Ordering::Relaxed);
        reset(&client, None);
        return;
    }
    let Ok(server) = TcpStream::connect(&upstream).await else {
        stats.refused.fetch_add(1, Ordering::Relaxed);
        reset(&client, None);
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (mut client, mut server) = (client, server);
    let mut from_client = vec![0u8; 16 * 1024];
    let mut from_server = vec![0u8; 16 * 1024];
    let mut held = false;
    loop {
        // Which side has data (or closed); or the fault changed.
        let (n, to_server) = tokio::select! {
            r = client.read(&mut from_client) => match r { Ok(n) if n > 0 => (n, true), _ => return },
            r = server.read(&mut from_server) => match r { Ok(n) if n > 0 => (n, false), _ => return },
            changed = rx.changed() => {
                if changed.is_err() { return; }
                let fault = *rx.borrow();
                if fault == Fault::Down || (held && fault != Fault::Blackhole) {
                    stats.resets.fetch_add(1, Ordering::Relaxed);
                    reset(&client, Some(&server));
                    return;
                }
                continue;
            }
        };
        stats.chunks.fetch_add(1, Ordering::Relaxed);
        let fault = *rx.borrow();
        match fault {
            Fault::Pass => {}
            Fault::Latency(d) => tokio::time::sleep(d).await,
            Fault::Reset(p) => {
                if rng.unit() < p {
                    stats.resets.fetch_add(1, Ordering::Relaxed);
                    reset(&client, Some(&server));
                    return;
                }
            }
            Fault::Blackhole => {
                if !held {
                    stats.blackholed.fetch_add(1, Ordering::Relaxed);
                }
                held = true;
                continue;
            }
            Fault::Down => {
                stats.resets.fetch_add(1, Ordering::Relaxed);
                reset(&client, Some(&server));
                return;
            }
        }
        let written = if to_server {
            server.write_all(&from_client[..n]).await
        } else {
            client.write_all(&from_server[..n]).await
        };
        if written.is_err() {
            reset(&client, Some(&server));
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> u16 {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = listener.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    loop {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                if s.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        port
    }

    async fn round_trip(port: u16) -> std::io::Result<Vec<u8>> {
        let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
        s.write_all(b"hello").await?;
        let mut buf = [0u8; 5];
        s.read_exact(&mut buf).await?;
        Ok(buf.to_vec())
    }

    #[tokio::test]
    async fn pass_forwards_and_down_resets() {
        // GIVEN a proxy in front of an echo server
        let upstream = echo_server().await;
        let proxy = Proxy::start(format!("127.0.0.1:{upstream}"), 1)
            .await
            .unwrap();
        // WHEN traffic passes THEN it arrives unchanged
        assert_eq!(round_trip(proxy.port).await.unwrap(), b"hello");
        // WHEN the upstream is "down" THEN connections fail
        proxy.set(Fault::Down);
        assert!(round_trip(proxy.port).await.is_err());
        // WHEN it is back THEN traffic flows again
        proxy.set(Fault::Pass);
        assert_eq!(round_trip(proxy.port).await.unwrap(), b"hello");
        assert!(proxy.stats.refused.load(Ordering::Relaxed) >= 1);
    }

    #[tokio::test]
    async fn certain_reset_breaks_the_exchange_and_blackhole_holds_then_resets() {
        let upstream = echo_server().await;
        let proxy = Proxy::start(format!("127.0.0.1:{upstream}"), 2)
            .await
            .unwrap();
        proxy.set(Fault::Reset(1.0));
        assert!(round_trip(proxy.port).await.is_err());
        // GIVEN a blackhole: the request is swallowed, nothing comes back
        proxy.set(Fault::Blackhole);
        let mut s = TcpStream::connect(("127.0.0.1", proxy.port)).await.unwrap();
        s.write_all(b"hello").await.unwrap();
        let mut buf = [0u8; 5];
        let waited = tokio::time::timeout(Duration::from_millis(300), s.read_exact(&mut buf)).await;
        assert!(waited.is_err(), "a blackholed connection must not answer");
        // WHEN the blackhole ends THEN the held connection is reset, not resumed
        proxy.set(Fault::Pass);
        let after = tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut buf)).await;
        assert!(matches!(after, Ok(Err(_))), "{after:?}");
        assert_eq!(proxy.stats.blackholed.load(Ordering::Relaxed), 1);
    }
}
