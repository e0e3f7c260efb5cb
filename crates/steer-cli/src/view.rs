//! Text pieces the status views share (`steer stats`, `steer top`, for an
//! engine and for `steer rfs`): a ratatui screen drawn to plain text,
//! right-aligned cells, an uptime in words, a rate between two samples, a
//! screen's headline and footer. Below every view; imports none of them.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table};

/// A screen of `height` lines drawn by `render`, as plain text `width`
/// columns wide (at least 40).
pub fn screen_text(width: u16, height: u16, render: impl Fn(Rect, &mut Buffer)) -> String {
    let area = Rect::new(0, 0, width.max(40), height);
    let mut buf = Buffer::empty(area);
    render(area, &mut buf);
    let mut out = String::new();
    for row in buf.content().chunks(area.width as usize) {
        let line: String = row.iter().map(|c| c.symbol()).collect();
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Right-aligned cells.
pub fn right<const N: usize>(texts: [String; N]) -> Vec<Cell<'static>> {
    texts
        .into_iter()
        .map(|t| Cell::from(Line::from(t).right_aligned()))
        .collect()
}

/// `1h02m`, `3m05s`, `12.3s`.
pub fn uptime(s: f64) -> String {
    let whole = s as u64;
    if whole >= 3600 {
        format!("{}h{:02}m", whole / 3600, (whole % 3600) / 60)
    } else if whole >= 60 {
        format!("{}m{:02}s", whole / 60, whole % 60)
    } else {
        format!("{s:.1}s")
    }
}

/// `now - before` per second over `dt` seconds, or `-` without an earlier
/// value, over no time, or when the counter went down.
pub fn rate(now: u64, before: Option<u64>, dt: f64) -> String {
    match before {
        Some(b) if dt > 0.0 && now >= b => format!("{:.0}", (now - b) as f64 / dt),
        _ => "-".into(),
    }
}

/// A screen's first line, in bold.
pub fn headline_line(text: String) -> Paragraph<'static> {
    Paragraph::new(text).style(Style::new().add_modifier(Modifier::BOLD))
}

/// A screen's last line: why the latest refresh failed (`status`, in red),
/// else the seconds the rates are over (`None`: no earlier sample) and how
/// to quit.
pub fn footer(status: Option<&str>, dt: Option<f64>) -> Paragraph<'static> {
    match status {
        Some(e) => Paragraph::new(format!("not refreshed: {e}")).style(Style::new().fg(Color::Red)),
        None => Paragraph::new(format!(
            "rates over {}; q quits",
            dt.map_or("-".to_string(), |dt| format!("{dt:.1} s"))
        ))
        .style(Style::new().add_modifier(Modifier::DIM)),
    }
}

/// A table of `rows` under a bold header of right-aligned `header` cells,
/// in a frame titled `title`.
pub fn framed_table<'a>(
    rows: impl IntoIterator<Item = Row<'a>>,
    widths: Vec<Constraint>,
    header: &[&str],
    title: &'a str,
) -> Table<'a> {
    let header: Vec<Cell> = header
        .iter()
        .map(|t| Cell::from(Line::from(t.to_string()).right_aligned()))
        .collect();
    Table::new(rows, widths)
        .header(Row::new(header).style(Style::new().add_modifier(Modifier::BOLD)))
        .block(Block::bordered().title(title))
}

/// `row`, in bold when it is a total.
pub fn bold_if(row: Row<'_>, total: bool) -> Row<'_> {
    if total {
        row.style(Style::new().add_modifier(Modifier::BOLD))
    } else {
        row
    }
}

/// The cells of the row of a screen's `text` whose first cell is `label`
/// (frame borders trimmed), for the views' tests.
#[cfg(test)]
pub(crate) fn row_cells(text: &str, label: &str) -> Vec<String> {
    text.lines()
        .map(|l| l.trim_matches(|c| c == '│' || c == ' '))
        .find(|l| l.split_whitespace().next() == Some(label))
        .unwrap_or_else(|| panic!("no row {label} in\n{text}"))
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// A status snapshot that knows which process made it and when.
pub trait Sampled {
    /// The process that answered.
    fn pid(&self) -> u32;
    /// Its uptime when it answered, in seconds.
    fn uptime_s(&self) -> f64;
}

impl Sampled for steer_engine::observe::LiveStats {
    fn pid(&self) -> u32 {
        self.pid
    }
    fn uptime_s(&self) -> f64 {
        self.uptime_s
    }
}

impl Sampled for crate::rfs_live::RfsLive {
    fn pid(&self) -> u32 {
        self.pid
    }
    fn uptime_s(&self) -> f64 {
        self.uptime_s
    }
}

/// What a `steer top` screen shows: the latest snapshot, the one before
/// (for rates, kept only when it came from the same process) and why the
/// latest refresh failed, if it did. Each kind of snapshot draws itself
/// in its own module (`impl Samples<LiveStats>`, `impl Samples<RfsLive>`).
#[derive(Debug)]
pub struct Samples<T> {
    pub(crate) now: T,
    pub(crate) before: Option<T>,
    pub(crate) status: Option<String>,
}

impl<T: Sampled> Samples<T> {
    /// The first snapshot; no rates yet.
    pub fn new(first: T) -> Self {
        Self {
            now: first,
            before: None,
            status: None,
        }
    }

    /// A new snapshot; rates are taken against the previous one when it
    /// came from the same process.
    pub fn update(&mut self, next: T) {
        let previous = std::mem::replace(&mut self.now, next);
        self.before = (previous.pid() == self.now.pid()
            && previous.uptime_s() < self.now.uptime_s())
        .then_some(previous);
        self.status = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_needs_an_earlier_value_time_and_a_counter_that_grew() {
        assert_eq!(rate(10, Some(4), 2.0), "3");
        assert_eq!(rate(10, None, 2.0), "-");
        assert_eq!(rate(10, Some(4), 0.0), "-");
        assert_eq!(rate(3, Some(4), 2.0), "-");
    }

    #[derive(Debug)]
    struct Snap(u32, f64);

    impl Sampled for Snap {
        fn pid(&self) -> u32 {
            self.0
        }
        fn uptime_s(&self) -> f64 {
            self.1
        }
    }

    #[test]
    fn rates_are_taken_only_against_the_same_process_earlier() {
        let mut s = Samples::new(Snap(1, 5.0));
        assert!(s.before.is_none(), "no rates from one snapshot");
        s.update(Snap(1, 6.0));
        assert_eq!(s.before.as_ref().map(|b| b.1), Some(5.0));
        s.status = Some("refresh failed".into());
        s.update(Snap(2, 1.0));
        assert!(s.before.is_none(), "another process");
        assert!(s.status.is_none(), "a refresh clears the failure");
        s.update(Snap(2, 0.5));
        assert!(s.before.is_none(), "the same pid, restarted");
    }

    #[test]
    fn uptime_reads_well() {
        assert_eq!(uptime(12.34), "12.3s");
        assert_eq!(uptime(185.0), "3m05s");
        assert_eq!(uptime(3720.0), "1h02m");
    }
}
