//! What the demo shows on stderr while it runs: one line per phase and progress bars; stdout is
//! left to the summary.

use indicatif::{ProgressBar, ProgressStyle};

/// Tells the person watching which step the demo is at (stderr, beside the bars).
pub(crate) fn phase(message: &str) {
    eprintln!("outbox-demo: {message}");
}

/// A progress bar of `len` steps, labelled, with its rate and elapsed time.
pub(crate) fn bar(len: u64, label: &str) -> ProgressBar {
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(&format!(
            "{label} [{{bar:40}}] {{pos:>7}}/{{len:7}} {{per_sec:>12}} {{elapsed:>4}}"
        ))
        .expect("valid template")
        .progress_chars("=> "),
    );
    bar
}
