//! Hostile neighbours: clients on 127.0.0.1 that open connections and send nothing, drip a
//! request head a byte at a time, or drip bytes after their answer. Every job on a node can
//! reach the exporter's port; none of them may hold Prometheus's scrape back, nor grow the
//! exporter's threads or memory without bound. Every client here is on 127.0.0.1, and bounded
//! in number and in time.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::{Server, live_dir, put, state};

/// Steps and GPUs of each in the directory of the unread answers test.
const STEPS: u32 = 300;
const GPUS: usize = 4;

/// A head that never ends: its bytes are sent one at a time.
const ENDLESS_HEAD: &[u8] = b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Drip: ";

/// Most connections the crowd opens in all (it opens a new one for each the exporter closes).
const MAX_OPENED: usize = 50_000;

/// What a crowd client does.
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    /// Connects and sends nothing.
    Silent,
    /// Sends [`ENDLESS_HEAD`] one byte per tick.
    DripHead,
    /// Sends a whole request, then one byte per tick after its answer.
    DripAfter,
}

struct Client {
    kind: Kind,
    s: Option<TcpStream>,
    sent: usize,
}

impl Client {
    fn open(&mut self, addr: &str) -> bool {
        let Ok(mut s) = TcpStream::connect(addr) else {
            return false;
        };
        if self.kind == Kind::DripAfter
            && s.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                .is_err()
        {
            return false;
        }
        s.set_nonblocking(true).unwrap();
        self.s = Some(s);
        self.sent = 0;
        true
    }

    /// One tick: reads what the exporter sent, sends its byte; false when the exporter has
    /// closed the connection.
    fn tick(&mut self) -> bool {
        let Some(s) = self.s.as_mut() else {
            return false;
        };
        let mut buf = [0u8; 65536];
        loop {
            match s.read(&mut buf) {
                // A DripAfter client has its answer and the exporter's end of writing: it goes
                // on sending (the exporter may take what it sends, for a while).
                Ok(0) if self.kind == Kind::DripAfter => break,
                Ok(0) => return false,
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => return false,
            }
        }
        let byte = match self.kind {
            Kind::Silent => return true,
            Kind::DripHead => ENDLESS_HEAD.get(self.sent).copied().unwrap_or(b'a'),
            Kind::DripAfter => b'x',
        };
        self.sent += 1;
        matches!(s.write(&[byte]), Ok(1))
    }
}

/// Clients of each kind kept open (a closed one is opened anew) until dropped.
pub struct Crowd {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<usize>>,
}

impl Crowd {
    /// `silent`, `drip_head` and `drip_after` clients of `addr`, ticking every `tick`.
    pub fn start(
        addr: &str,
        silent: usize,
        drip_head: usize,
        drip_after: usize,
        tick: Duration,
    ) -> Crowd {
        let addr = addr.to_string();
        assert!(addr.starts_with("127.0.0.1:"), "{addr}");
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let mut clients: Vec<Client> = [
            (Kind::Silent, silent),
            (Kind::DripHead, drip_head),
            (Kind::DripAfter, drip_after),
        ]
        .iter()
        .flat_map(|&(kind, n)| (0..n).map(move |_| kind))
        .map(|kind| Client {
            kind,
            s: None,
            sent: 0,
        })
        .collect();
        let mut opened = 0;
        for c in &mut clients {
            assert!(c.open(&addr), "connecting to {addr}");
            opened += 1;
        }
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::Relaxed) {
                let t0 = Instant::now();
                for c in &mut clients {
                    if !c.tick() && opened < MAX_OPENED {
                        c.s = None;
                        opened += usize::from(c.open(&addr));
                    }
                }
                std::thread::sleep(tick.saturating_sub(t0.elapsed()));
            }
            opened
        });
        Crowd {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops the clients; the connections they opened in all.
    pub fn stop(mut self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

impl Drop for Crowd {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn scrapes_answer_within_a_second_while_64_silent_and_8_dripping_clients_hold_connections() {
    let t = live_dir("exporter-crowd");
    let dir = t.join("live");
    for job in 0..20 {
        put(&dir, &state(300 + job, "0", 2));
    }
    let s = Server::start(&dir);
    let threads_idle = s.status_field("Threads:");
    let rss_idle = s.status_field("VmRSS:");
    // Half the drippers drip a request head, half drip after their answer.
    let crowd = Crowd::start(&s.addr, 64, 4, 4, Duration::from_millis(150));
    let mut took = Vec::new();
    let (mut threads, mut rss) = (0, 0);
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(200));
        let t0 = Instant::now();
        let m = s.metrics_within(Duration::from_secs(5));
        took.push(t0.elapsed().as_secs_f64());
        assert!(m.contains("gpu_tracker_exporter_steps 20\n"), "{m}");
        threads = threads.max(s.status_field("Threads:"));
        rss = rss.max(s.status_field("VmRSS:"));
    }
    let opened = crowd.stop();
    let worst = took.iter().copied().fold(0.0, f64::max);
    let n = took.len();
    let med = median(&mut took);
    println!(
        "exporter under 64 silent + 8 dripping clients: {n} scrapes, median {:.1} ms, \
         max {:.1} ms; threads {threads_idle} idle, at most {threads}; VmRSS {rss_idle} kB \
         idle, at most {rss} kB; {opened} connections opened",
        med * 1000.0,
        worst * 1000.0,
    );
    assert!(
        worst < 1.0,
        "a scrape took {worst:.2} s (median {med:.3} s) with the crowd connected"
    );
    // Bounded: the exporter's connection threads, and a few MiB for them.
    assert!(threads <= 24, "{threads} threads");
    assert!(
        rss < rss_idle + 16 * 1024,
        "VmRSS {rss_idle} kB idle, {rss} kB under the crowd"
    );
}

/// How long after `start` the exporter closes `s`, which sends a byte every 150 ms; at most
/// `limit`.
fn closed_after(s: &mut TcpStream, start: Instant, limit: Duration) -> Duration {
    while start.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(150));
        if s.write_all(b"x").is_err() {
            break;
        }
    }
    start.elapsed()
}

#[test]
fn a_silent_or_dripping_client_is_let_go_within_its_deadline() {
    let t = live_dir("exporter-drip");
    let dir = t.join("live");
    put(&dir, &state(400, "0", 1));
    let s = Server::start(&dir);
    // A client that sends its request, reads its answer, then drips a byte every 150 ms: the
    // exporter lingers a moment for it, no more, and answers a scrape meanwhile.
    let addr = s.addr.clone();
    let dripper = std::thread::spawn(move || {
        let mut c = TcpStream::connect(&addr).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut answer = String::new();
        c.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        closed_after(&mut c, Instant::now(), Duration::from_secs(10))
    });
    std::thread::sleep(Duration::from_millis(400));
    let t0 = Instant::now();
    let scrape =
        std::panic::catch_unwind(|| s.metrics_within(Duration::from_secs(5))).map(|_| t0.elapsed());
    let held = dripper.join().unwrap();
    assert!(
        held < Duration::from_secs(2),
        "a client dripping after its answer was held {held:?} (a scrape meanwhile: {scrape:?})"
    );
    let scrape = scrape.unwrap();
    assert!(scrape < Duration::from_secs(1), "a scrape took {scrape:?}");
    // A client that sends nothing is answered 408 within the head deadline (1.5 s).
    let mut silent = TcpStream::connect(&s.addr).unwrap();
    let t0 = Instant::now();
    silent
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut got = String::new();
    let _ = silent.read_to_string(&mut got);
    let waited = t0.elapsed();
    assert!(got.starts_with("HTTP/1.1 408 "), "{got:?} after {waited:?}");
    assert!(
        waited < Duration::from_secs(3),
        "a silent client was held {waited:?}"
    );
    // A client dripping its head is cut off within the head deadline too.
    let mut slow = TcpStream::connect(&s.addr).unwrap();
    let t0 = Instant::now();
    let mut sent = 0;
    while t0.elapsed() < Duration::from_secs(10) {
        if slow
            .write_all(&ENDLESS_HEAD[sent % ENDLESS_HEAD.len()..][..1])
            .is_err()
        {
            break;
        }
        sent += 1;
        std::thread::sleep(Duration::from_millis(150));
    }
    let held = t0.elapsed();
    assert!(
        held < Duration::from_secs(3),
        "a client dripping its head was held {held:?}"
    );
}

#[test]
fn clients_that_leave_their_answers_unread_do_not_hold_a_scrape() {
    let t = live_dir("exporter-unread");
    let dir = t.join("live");
    // An answer of megabytes: more than the kernel holds for a client that does not read.
    for job in 0..STEPS {
        put(&dir, &state(500 + job, "0", GPUS));
    }
    let s = Server::start(&dir);
    let size = s.metrics().len();
    // More clients than the exporter serves at once, each asking for the metrics and never
    // reading them, one after another: each is being answered when the next comes.
    let unread: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut c = TcpStream::connect(&s.addr).unwrap();
            c.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
            std::thread::sleep(Duration::from_millis(150));
            c
        })
        .collect();
    let mut took = Vec::new();
    let until = Instant::now() + Duration::from_secs(6);
    while Instant::now() < until {
        std::thread::sleep(Duration::from_millis(300));
        let t0 = Instant::now();
        s.metrics_within(Duration::from_secs(12));
        took.push(t0.elapsed().as_secs_f64());
    }
    drop(unread);
    let worst = took.iter().copied().fold(0.0, f64::max);
    let n = took.len();
    let med = median(&mut took);
    println!(
        "exporter with 20 clients leaving a {size}-byte answer unread: {n} scrapes, median \
         {:.1} ms, max {:.1} ms",
        med * 1000.0,
        worst * 1000.0
    );
    assert!(
        worst < 3.0,
        "a scrape took {worst:.2} s (median {med:.3} s)"
    );
}
