//! Text pieces the status views share (`steer stats`, `steer top`, for an
//! engine and for `steer rfs`): a ratatui screen drawn to plain text,
//! right-aligned cells, an uptime in words. Below every view; imports
//! none of them.

use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Cell, Row, Table};

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uptime_reads_well() {
        assert_eq!(uptime(12.34), "12.3s");
        assert_eq!(uptime(185.0), "3m05s");
        assert_eq!(uptime(3720.0), "1h02m");
    }
}
