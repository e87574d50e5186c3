//! The one logging set-up of every binary: structured logs on stderr, so stdout carries only
//! results (summaries, status tables); CloudWatch EMF metric documents go to stderr too, through
//! the same [`Lines`], so a log line never lands inside a document.
//!
//! Every binary decides text or JSON the same way ([`LogFormat::detect`]): what Lambda's advanced
//! logging controls ask for (`AWS_LAMBDA_LOG_FORMAT`) when set, else text for a person at a
//! terminal and JSON for everything else (a file, a pipe, CloudWatch, ECS). Colour codes are
//! written only to a terminal.

use std::io::{IsTerminal, Write};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// One JSON object per line (CloudWatch Logs Insights, ECS, a redirected log file).
    Json,
    /// Human-readable text.
    Text,
}

impl LogFormat {
    /// `AWS_LAMBDA_LOG_FORMAT` (`JSON` or `Text`) when set; otherwise text when stderr is a
    /// terminal, JSON when it is not.
    pub fn detect() -> Self {
        Self::choose(
            std::env::var("AWS_LAMBDA_LOG_FORMAT").ok().as_deref(),
            std::io::stderr().is_terminal(),
        )
    }

    fn choose(lambda_log_format: Option<&str>, stderr_is_terminal: bool) -> Self {
        match lambda_log_format.map(str::trim) {
            Some(f) if f.eq_ignore_ascii_case("json") => Self::Json,
            Some(f) if f.eq_ignore_ascii_case("text") => Self::Text,
            _ if stderr_is_terminal => Self::Text,
            _ => Self::Json,
        }
    }
}

/// Installs the global subscriber in the [detected](LogFormat::detect) format. The level comes
/// from `RUST_LOG`, else `AWS_LAMBDA_LOG_LEVEL`, else `info`.
pub fn init_tracing() {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| {
            let level = std::env::var("AWS_LAMBDA_LOG_LEVEL").unwrap_or_else(|_| "info".into());
            EnvFilter::try_new(level.to_ascii_lowercase())
        })
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(Lines::stderr())
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(false);
    match LogFormat::detect() {
        LogFormat::Json => builder.json().with_current_span(false).init(),
        LogFormat::Text => builder.init(),
    }
}

/// Writes `program: words` to stderr when stderr is a person's terminal: the command's outcome in
/// words, its last line, after every log line (which stay what they are, for machines). Not at a
/// terminal (ECS, Lambda, a pipe) nothing is written: the logs and the summaries say it there.
pub fn outcome(program: &str, words: &str) {
    if std::io::stderr().is_terminal() {
        // Nowhere left to report a failure to write the last line.
        let _ = Lines::stderr().write_line(outcome_line(program, words).as_bytes());
    }
}

/// The outcome line: `program: words`.
pub fn outcome_line(program: &str, words: &str) -> String {
    format!("{program}: {words}")
}

/// The process's one output for log lines and metric documents: each line is written whole,
/// under one lock, so a log line never lands inside a metric document (which CloudWatch would
/// then reject) nor a document inside a log line. `tracing` writes through it
/// ([`init_tracing`]), and so does `crate::metrics::emf::Emf::flush`.
#[derive(Clone)]
pub struct Lines {
    out: Arc<Mutex<Box<dyn Write + Send>>>,
}

impl std::fmt::Debug for Lines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lines").finish_non_exhaustive()
    }
}

impl Lines {
    /// Whole lines to `out`.
    pub fn new(out: impl Write + Send + 'static) -> Self {
        Self {
            out: Arc::new(Mutex::new(Box::new(out))),
        }
    }

    /// The process's stderr, shared by every caller.
    pub fn stderr() -> Self {
        static STDERR: OnceLock<Lines> = OnceLock::new();
        STDERR.get_or_init(|| Self::new(std::io::stderr())).clone()
    }

    /// Writes `line` and a newline (unless it ends with one) in one piece.
    ///
    /// # Errors
    /// When the output cannot be written.
    pub fn write_line(&self, line: &[u8]) -> std::io::Result<()> {
        let mut whole = Vec::with_capacity(line.len() + 1);
        whole.extend_from_slice(line);
        if !whole.ends_with(b"\n") {
            whole.push(b'\n');
        }
        let mut out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        out.write_all(&whole)?;
        out.flush()
    }
}

/// One log event, gathered until `tracing` is done with it and then written whole.
#[derive(Debug)]
pub struct LineBuffer<'a> {
    lines: &'a Lines,
    buffer: Vec<u8>,
}

impl Write for LineBuffer<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.buffer.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LineBuffer<'_> {
    fn drop(&mut self) {
        if !self.buffer.is_empty() {
            // Nowhere left to report a failure to write a log line.
            let _ = self.lines.write_line(&self.buffer);
        }
    }
}

impl<'a> MakeWriter<'a> for Lines {
    type Writer = LineBuffer<'a>;

    fn make_writer(&'a self) -> Self::Writer {
        LineBuffer {
            lines: self,
            buffer: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lambda_setting_wins_then_the_terminal_decides() {
        assert_eq!(LogFormat::choose(Some("JSON"), true), LogFormat::Json);
        assert_eq!(LogFormat::choose(Some("Text"), false), LogFormat::Text);
        assert_eq!(LogFormat::choose(None, true), LogFormat::Text);
        assert_eq!(LogFormat::choose(None, false), LogFormat::Json);
        assert_eq!(LogFormat::choose(Some("other"), false), LogFormat::Json);
    }
}
