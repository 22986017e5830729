//! The one way `gpu-tracker-report` prints. Text for people has every character that could
//! steer a terminal replaced ([`terminal_safe`]: records hold text that users chose), JSON has
//! the same characters written as `\u` escapes ([`json_terminal_safe`]: the same JSON value),
//! and a reader that goes away (`... | head -1`) ends the output ([`Stop::Closed`]) instead of
//! panicking as `print!` does. Messages go to standard error after the program's name; a
//! standard error that cannot be written is left alone.

use std::io::{self, Write};

use super::exit::{Exit, Stop, fail};
use crate::text::{json_terminal_safe, terminal_safe};

/// The program's name, before every message on standard error.
pub const PROGRAM: &str = "gpu-tracker-report";

/// Standard output and standard error, as every command writes them.
pub struct Out<'a> {
    stdout: Box<dyn Write + 'a>,
    stderr: Box<dyn Write + 'a>,
}

impl Out<'static> {
    /// The process's standard output (held locked) and standard error.
    pub fn stdio() -> Out<'static> {
        Out::new(io::stdout().lock(), io::stderr())
    }
}

impl<'a> Out<'a> {
    /// An output writing to `stdout` and `stderr`.
    pub fn new(stdout: impl Write + 'a, stderr: impl Write + 'a) -> Out<'a> {
        Out {
            stdout: Box::new(stdout),
            stderr: Box::new(stderr),
        }
    }

    /// Prints `text` for people, made safe for a terminal.
    pub fn text(&mut self, text: &str) -> Result<(), Stop> {
        self.write(terminal_safe(text).as_bytes())
    }

    /// [`Out::text`] and a newline.
    pub fn line(&mut self, text: &str) -> Result<(), Stop> {
        self.text(text)?;
        self.write(b"\n")
    }

    /// Prints JSON text with what a terminal must not see escaped (the same JSON).
    pub fn json(&mut self, json: &str) -> Result<(), Stop> {
        self.write(json_terminal_safe(json).as_bytes())
    }

    /// Writes out what is held back. Called once, at the end.
    pub fn flush(&mut self) -> Result<(), Stop> {
        let r = self.stdout.flush();
        written(r)
    }

    /// Prints `PROGRAM: message` on standard error, made safe for a terminal. Nothing can be
    /// done when standard error cannot be written: it is not tried again.
    pub fn warn(&mut self, message: &str) {
        let line = format!("{PROGRAM}: {}\n", terminal_safe(message));
        let _ = self.stderr.write_all(line.as_bytes());
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), Stop> {
        let r = self.stdout.write_all(bytes);
        written(r)
    }
}

/// The result of a write to standard output: a closed pipe is the end of the output, any
/// other error a failure.
fn written(r: io::Result<()>) -> Result<(), Stop> {
    match r {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => Err(Stop::Closed),
        Err(e) => Err(fail(Exit::Failed, format!("standard output: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A writer that takes `room` bytes, then fails with `kind`.
    struct Fails {
        room: usize,
        kind: io::ErrorKind,
    }

    impl Write for Fails {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            if self.room == 0 {
                return Err(io::Error::from(self.kind));
            }
            let n = b.len().min(self.room);
            self.room -= n;
            Ok(n)
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn text_is_filtered_json_escaped_and_messages_named() {
        let (mut o, mut e) = (Vec::new(), Vec::new());
        let mut out = Out::new(&mut o, &mut e);
        out.line("job \u{1b}[2Jx\u{202e}y\tz").unwrap();
        out.json("{\"name\": \"a\u{9b}b\"}\n").unwrap();
        out.warn("job 3: bad\u{7}");
        out.flush().unwrap();
        drop(out);
        assert_eq!(
            String::from_utf8(o).unwrap(),
            "job ?[2Jx?y\tz\n{\"name\": \"a\\u009bb\"}\n"
        );
        assert_eq!(
            String::from_utf8(e).unwrap(),
            "gpu-tracker-report: job 3: bad?\n"
        );
    }

    #[test]
    fn a_closed_pipe_ends_the_output_and_other_errors_fail() {
        let closed = Fails {
            room: 3,
            kind: io::ErrorKind::BrokenPipe,
        };
        let mut out = Out::new(closed, io::sink());
        assert_eq!(out.text("abcdef"), Err(Stop::Closed));
        let full = Fails {
            room: 0,
            kind: io::ErrorKind::StorageFull,
        };
        let mut out = Out::new(full, io::sink());
        match out.json("{}") {
            Err(Stop::Fail(Exit::Failed, m)) => assert!(m.starts_with("standard output: "), "{m}"),
            r => panic!("{r:?}"),
        }
        // A standard error that cannot be written is no failure, and no panic.
        let gone = Fails {
            room: 0,
            kind: io::ErrorKind::BrokenPipe,
        };
        let mut out = Out::new(io::sink(), gone);
        out.warn("nobody reads this");
        assert_eq!(out.line("still written"), Ok(()));
    }
}
