//! The load driver: HTTP/1.1 keep-alive connections (hyper, TCP_NODELAY), closed loop (each
//! connection sends back to back) or open loop (a fixed rate, latency counted from the intended
//! send time so a stall is not hidden), and paced streams timed per event.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::R;

/// Where and what to send.
#[derive(Clone)]
pub struct Target {
    pub name: String,
    pub addr: SocketAddr,
    pub path: String,
    pub auth: Option<String>,
    pub body: Bytes,
}

/// Latencies (µs) and failures of one run.
#[derive(Default)]
pub struct Sample {
    pub lat_us: Vec<u32>,
    pub errors: u64,
    pub elapsed: Duration,
}

impl Sample {
    pub fn rps(&self) -> f64 {
        self.lat_us.len() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    pub fn pct(&self, p: f64) -> u32 {
        pct(&self.lat_us, p)
    }

    fn merge(&mut self, o: Sample) {
        self.lat_us.extend(o.lat_us);
        self.errors += o.errors;
    }
}

/// The `p`-th percentile (0–100) of unsorted values; 0 when empty.
pub fn pct(v: &[u32], p: f64) -> u32 {
    if v.is_empty() {
        return 0;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let i = ((p / 100.0) * (s.len() - 1) as f64).round() as usize;
    s[i.min(s.len() - 1)]
}

async fn connect(addr: SocketAddr) -> R<SendRequest<Full<Bytes>>> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(send)
}

fn request(t: &Target) -> R<hyper::Request<Full<Bytes>>> {
    let mut b = hyper::Request::post(t.path.as_str())
        .header(http::header::HOST, t.addr.to_string())
        .header(http::header::CONTENT_TYPE, "application/json");
    if let Some(a) = &t.auth {
        b = b.header(http::header::AUTHORIZATION, a.as_str());
    }
    Ok(b.body(Full::new(t.body.clone()))?)
}

/// One request on `send`, whole body read; `Ok(true)` for a 200.
async fn once(send: &mut SendRequest<Full<Bytes>>, t: &Target) -> R<bool> {
    send.ready().await?;
    let resp = send.send_request(request(t)?).await?;
    let ok = resp.status() == 200;
    resp.into_body().collect().await?;
    Ok(ok)
}

/// One connection's loop until `end`; `gap` paces it (open loop), `None` sends back to back.
async fn connection(t: Target, end: Instant, gap: Option<Duration>, offset: Duration) -> Sample {
    let mut s = Sample::default();
    let mut send = None;
    let mut due = Instant::now() + offset;
    while Instant::now() < end {
        // Open loop: a request the server held up past its due time is timed from when it was
        // due (a stall is not hidden); one that waited on the timer from when it was sent (the
        // timer's millisecond slop is the driver's, not the server's).
        let mut start = Instant::now();
        if gap.is_some() {
            if start < due {
                tokio::time::sleep_until(due.into()).await;
                start = Instant::now();
            } else {
                start = due;
            }
            if start >= end {
                break;
            }
        }
        if send.is_none() {
            match connect(t.addr).await {
                Ok(c) => send = Some(c),
                Err(_) => {
                    s.errors += 1;
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            }
        }
        let Some(c) = send.as_mut() else { continue };
        match once(c, &t).await {
            Ok(true) => s.lat_us.push(start.elapsed().as_micros().min(u128::from(u32::MAX)) as u32),
            Ok(false) => s.errors += 1,
            Err(_) => {
                s.errors += 1;
                send = None;
            }
        }
        if let Some(g) = gap {
            due += g;
        }
    }
    s
}

pub async fn run(t: &Target, conns: usize, dur: Duration, rate: Option<f64>) -> Sample {
    let start = Instant::now();
    let end = start + dur;
    let gap = rate.map(|r| Duration::from_secs_f64(conns as f64 / r.max(1.0)));
    let tasks: Vec<_> = (0..conns)
        .map(|i| {
            let offset = gap.map_or(Duration::ZERO, |g| g.mul_f64(i as f64 / conns as f64));
            tokio::spawn(connection(t.clone(), end, gap, offset))
        })
        .collect();
    let mut all = Sample::default();
    for task in tasks {
        if let Ok(s) = task.await {
            all.merge(s);
        }
    }
    // Open loop: the rate over the intended window (requests still due when it closed are not
    // sent, so the wall time to the last answer would understate it).
    all.elapsed = if rate.is_some() { dur } else { start.elapsed() };
    all
}

/// `conns` connections sending back to back for `dur` (after a warm-up of `warm`).
pub async fn closed(t: &Target, conns: usize, warm: Duration, dur: Duration) -> Sample {
    run(t, conns, warm, None).await;
    run(t, conns, dur, None).await
}

/// `rate` requests per second spread over `conns` connections, for `dur`.
pub async fn open(t: &Target, conns: usize, rate: f64, dur: Duration) -> Sample {
    run(t, conns, dur, Some(rate)).await
}

/// Paced streams: time to first event and the gaps between events, in µs.
#[derive(Default)]
pub struct Streams {
    pub ttft_us: Vec<u32>,
    pub gaps_us: Vec<u32>,
    pub errors: u64,
    pub completed: u64,
}

async fn one_stream(t: Target) -> R<(u32, Vec<u32>)> {
    let mut send = connect(t.addr).await?;
    send.ready().await?;
    let start = Instant::now();
    let resp = send.send_request(request(&t)?).await?;
    if resp.status() != 200 {
        return Err(format!("status {}", resp.status()).into());
    }
    let mut body = resp.into_body();
    let (mut first, mut last, mut gaps) = (None, None::<Instant>, Vec::with_capacity(64));
    let mut tail = [0u8; 1];
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else { continue };
        let now = Instant::now();
        // Event ends ("\n\n"), also across a frame boundary.
        let mut ends = memchr::memmem::find_iter(&data, b"\n\n").count();
        if tail[0] == b'\n' && data.first() == Some(&b'\n') {
            ends += 1;
        }
        tail[0] = data.last().copied().unwrap_or(0);
        if ends == 0 {
            continue;
        }
        if first.is_none() {
            first = Some(now.duration_since(start).as_micros() as u32);
        }
        if let Some(l) = last {
            gaps.push(now.duration_since(l).as_micros() as u32);
        }
        last = Some(now);
    }
    Ok((first.ok_or("no event")?, gaps))
}

/// `n` concurrent streams, each on its own connection, `rounds` times.
pub async fn streams(t: &Target, n: usize, rounds: usize) -> Streams {
    let mut out = Streams::default();
    for _ in 0..rounds {
        let tasks: Vec<_> = (0..n).map(|_| tokio::spawn(one_stream(t.clone()))).collect();
        for task in tasks {
            match task.await {
                Ok(Ok((ttft, gaps))) => {
                    out.ttft_us.push(ttft);
                    out.gaps_us.extend(gaps);
                    out.completed += 1;
                }
                _ => out.errors += 1,
            }
        }
    }
    out
}
