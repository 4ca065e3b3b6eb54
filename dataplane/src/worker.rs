//! Thread-per-core serving: which serving thread this is, and how many there are.
//!
//! The binary runs one current-thread tokio runtime per core, each accepting on its own
//! `SO_REUSEPORT` listener. Each upstream has one connection pool per serving thread, so a
//! request and its upstream connection stay on one thread: no cross-thread wake-ups on the hot
//! path (they cost more than half the gap to nginx in `docs/BENCHMARKS.md`).

use std::cell::Cell;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

static COUNT: AtomicUsize = AtomicUsize::new(1);

thread_local! {
    static INDEX: Cell<usize> = const { Cell::new(0) };
}

/// Number of serving threads; set once at start, before the first snapshot is built.
pub fn count() -> usize {
    COUNT.load(Ordering::Relaxed).max(1)
}

pub fn set_count(n: usize) {
    COUNT.store(n.max(1), Ordering::Relaxed);
}

/// This thread's serving index (0 on any thread that is not a serving thread).
pub fn current() -> usize {
    INDEX.with(Cell::get)
}

pub fn set_current(i: usize) {
    INDEX.with(|c| c.set(i));
}

/// Binds `n` listeners to the same address with `SO_REUSEPORT`, so the kernel spreads incoming
/// connections over the serving threads. With port 0, the first socket picks the port and the
/// others join it.
pub fn bind_reuseport(addr: SocketAddr, n: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
    use socket2::{Domain, Socket, Type};
    let mut out = Vec::with_capacity(n);
    let mut addr = addr;
    for _ in 0..n.max(1) {
        let s = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
        s.set_reuse_address(true)?;
        s.set_reuse_port(true)?;
        s.set_nonblocking(true)?;
        s.bind(&addr.into())?;
        s.listen(1024)?;
        let l: std::net::TcpListener = s.into();
        addr = l.local_addr()?;
        out.push(l);
    }
    Ok(out)
}
