//! The answers to `GET /metrics`: rendered at most once a [`FRESH_FOR`] per format, and shared.
//!
//! Every connection that asks for a format within [`FRESH_FOR`] of its last rendering gets the
//! same bytes: a reference to one [`Rendered`] answer, which it holds while it writes, with no
//! copy and no lock of its own. One rendering is made at a time (those who wait for it then
//! share it), under a lock that no write holds, so a client that reads slowly or not at all
//! holds no one back. The renderings are made on one thread of their own: the memory a
//! rendering takes and gives back is its allocator's, reused by the next one, rather than
//! spread over the allocator's pools of every connection thread that happened to render.
//!
//! What answers can be alive at once is bounded, whatever the clients do: per format, the one
//! now shared and at most one before it, still held by connections writing it. A new one is
//! rendered only once no connection holds the one before the current one; until then the
//! current one is shared past its [`FRESH_FOR`] (by the write deadline of those connections at
//! most: `conn.rs`). At most four answers, then, two per format, and one being rendered in
//! place of one of them: the exporter's memory is its own, the states of one rendering and
//! those answers (docs/EXPORTER.md, "Memory", sizes the unit's `MemoryMax` on it).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use super::Exporter;
use super::http;
use super::metrics::Format;

/// How long a rendered answer is shared: requests within it get the same bytes.
pub const FRESH_FOR: Duration = Duration::from_secs(1);

/// An answer to `GET /metrics` in one format, rendered once and shared.
#[derive(Debug)]
pub struct Rendered {
    /// When it was rendered.
    pub at: Instant,
    /// Its HTTP head, from the status line to the empty line.
    pub head: Vec<u8>,
    /// The exposition.
    pub body: Vec<u8>,
}

/// What is kept of one format's answers.
#[derive(Debug, Default)]
struct Kept {
    /// The answer now shared.
    current: Option<Arc<Rendered>>,
    /// The one before it, alive while a connection still writes it.
    before: Weak<Rendered>,
}

/// The rendering thread, as the connections ask it.
#[derive(Debug)]
struct Renderer {
    ask: SyncSender<Format>,
    /// The rendering asked for; `None` when it failed (a bug: the thread goes on).
    made: Receiver<Option<(Vec<u8>, Vec<u8>)>>,
}

/// The exporter, on a thread of its own, and its shared answers.
#[derive(Debug)]
pub struct Answers {
    /// Locked while a rendering is made, and only then.
    renderer: Mutex<Renderer>,
    /// By [`index`]; locked only to look at or swap a reference.
    kept: Mutex<[Kept; 2]>,
    renders: AtomicU64,
}

fn index(f: Format) -> usize {
    match f {
        Format::OpenMetrics => 0,
        Format::Text => 1,
    }
}

impl Answers {
    /// Answers from `exporter`'s scrapes, rendered on a thread of their own (which ends with
    /// them). Fails only when no thread can be had.
    pub fn new(exporter: Exporter) -> std::io::Result<Answers> {
        let (ask, asked) = sync_channel(0);
        let (give, made) = sync_channel(1);
        std::thread::Builder::new()
            .name("gpu-tracker-exporter-render".into())
            .spawn(move || render_all(exporter, &asked, &give))?;
        Ok(Answers {
            renderer: Mutex::new(Renderer { ask, made }),
            kept: Mutex::new(Default::default()),
            renders: AtomicU64::new(0),
        })
    }

    /// The answer to `GET /metrics` in `format`: the one shared now, or a new rendering;
    /// `None` when the rendering failed.
    pub fn get(&self, format: Format) -> Option<Arc<Rendered>> {
        self.get_at(format, Instant::now)
    }

    /// Renderings made since the start.
    #[cfg(test)]
    pub fn renders(&self) -> u64 {
        self.renders.load(Ordering::Relaxed)
    }

    /// [`Answers::get`] with the time from `now`.
    fn get_at(&self, format: Format, now: impl Fn() -> Instant) -> Option<Arc<Rendered>> {
        if let Some(a) = self.shared(format, now()) {
            return Some(a);
        }
        // Nothing panics while holding it; were something to, the channels are still whole.
        let renderer = self.renderer.lock().unwrap_or_else(|p| p.into_inner());
        // Another connection may have had it rendered while this one waited.
        if let Some(a) = self.shared(format, now()) {
            return Some(a);
        }
        let at = now();
        renderer.ask.send(format).ok()?;
        let (head, body) = renderer.made.recv().ok()??;
        drop(renderer);
        let answer = Arc::new(Rendered { at, head, body });
        self.renders.fetch_add(1, Ordering::Relaxed);
        let mut kept = self.kept();
        let k = &mut kept[index(format)];
        k.before = k
            .current
            .take()
            .map_or_else(Weak::new, |c| Arc::downgrade(&c));
        k.current = Some(answer.clone());
        Some(answer)
    }

    /// The answer to share at `now`, if there is one: the current one while it is fresh, or
    /// while the one before it is still held (no third one is made meanwhile).
    fn shared(&self, format: Format, now: Instant) -> Option<Arc<Rendered>> {
        let kept = self.kept();
        let k = &kept[index(format)];
        let current = k.current.as_ref()?;
        let fresh = now.saturating_duration_since(current.at) < FRESH_FOR;
        (fresh || k.before.strong_count() > 0).then(|| current.clone())
    }

    fn kept(&self) -> MutexGuard<'_, [Kept; 2]> {
        // Nothing panics while holding it; were something to, the references are still whole.
        self.kept.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The rendering thread: renders each format asked for on `asked` and gives it on `give`,
/// until the [`Answers`] are dropped.
fn render_all(
    mut exporter: Exporter,
    asked: &Receiver<Format>,
    give: &SyncSender<Option<(Vec<u8>, Vec<u8>)>>,
) {
    while let Ok(format) = asked.recv() {
        // A panic leaves the exporter's counters as they were: the thread goes on.
        let made = std::panic::catch_unwind(AssertUnwindSafe(|| {
            let body = exporter.scrape(format).text.into_bytes();
            let head = http::head(
                "200 OK",
                format.content_type(),
                "Vary: Accept\r\n",
                body.len(),
            );
            (head, body)
        }));
        if give.send(made.ok()).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answers(tag: &str) -> (crate::cgroup::fixture::TempTree, Answers) {
        let t = crate::cgroup::fixture::TempTree::new(tag);
        let a = Answers::new(Exporter::new(t.path().join("none"))).unwrap();
        (t, a)
    }

    #[test]
    fn requests_within_a_second_share_one_rendering() {
        let (_t, a) = answers("exporter-answers-share");
        let t0 = Instant::now();
        let first = a.get_at(Format::OpenMetrics, || t0).unwrap();
        let soon = a
            .get_at(Format::OpenMetrics, || t0 + FRESH_FOR / 2)
            .unwrap();
        assert!(Arc::ptr_eq(&first, &soon));
        assert_eq!(a.renders(), 1);
        // The other format is its own rendering.
        let text = a.get_at(Format::Text, || t0).unwrap();
        assert!(text.body.ends_with(b"\n") && !text.body.ends_with(b"# EOF\n"));
        assert!(first.body.ends_with(b"# EOF\n"));
        assert_eq!(a.renders(), 2);
        let head = String::from_utf8(first.head.clone()).unwrap();
        assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
        let length = format!("Content-Length: {}\r\n", first.body.len());
        assert!(head.contains(&length), "{head}");
        // A second later: rendered anew.
        let later = a.get_at(Format::OpenMetrics, || t0 + FRESH_FOR).unwrap();
        assert!(!Arc::ptr_eq(&first, &later));
        assert_eq!(a.renders(), 3);
    }

    #[test]
    fn no_third_answer_is_made_while_the_one_before_is_held() {
        let (_t, a) = answers("exporter-answers-bound");
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // A client holds the first answer (it does not read it) ...
        let held = a.get_at(Format::Text, || at(0)).unwrap();
        let second = a.get_at(Format::Text, || at(1)).unwrap();
        assert!(!Arc::ptr_eq(&held, &second));
        // ... so the second is shared past its second, however many ask.
        for s in 2..5 {
            let again = a.get_at(Format::Text, || at(s)).unwrap();
            assert!(Arc::ptr_eq(&second, &again));
        }
        assert_eq!(a.renders(), 2);
        // Once it lets the first go, the next request has a new rendering.
        drop(held);
        let third = a.get_at(Format::Text, || at(5)).unwrap();
        assert!(!Arc::ptr_eq(&second, &third));
        assert_eq!(a.renders(), 3);
        // Held by no one, the answer before is gone: the cache keeps one answer per format.
        drop(second);
        let k = a.kept();
        assert_eq!(k[index(Format::Text)].before.strong_count(), 0);
        assert_eq!(k[index(Format::OpenMetrics)].before.strong_count(), 0);
        assert!(k[index(Format::OpenMetrics)].current.is_none());
    }
}
