//! Tables as every report prints them, the one renderer: fixed-width text
//! (each cell padded to its column's width, left- or right-aligned, one
//! space between columns) for the run report, the seed tables and the
//! sockperf comparison, and Markdown rows (`| a | b |`) for the seed
//! medians.
//!
//! Invariants: a cell wider than its column is printed whole (the row
//! grows, nothing is cut); a row with fewer cells than columns ends after
//! its last cell; a row with more cells than columns prints the extra
//! cells unpadded.

/// One column of a fixed-width table: its alignment and width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Col {
    /// Left-aligned, padded on the right to this width.
    L(usize),
    /// Right-aligned, padded on the left to this width.
    R(usize),
}

/// The columns of a fixed-width text table.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layout {
    cols: Vec<Col>,
}

impl Layout {
    /// A layout of left-aligned columns of widths `left`, then
    /// right-aligned ones of widths `right` (the shape of most tables: names
    /// first, numbers after).
    pub fn new(left: &[usize], right: &[usize]) -> Self {
        let cols = left.iter().map(|&w| Col::L(w));
        Layout {
            cols: cols.chain(right.iter().map(|&w| Col::R(w))).collect(),
        }
    }

    /// Appends `col`.
    pub fn push(&mut self, col: Col) -> &mut Self {
        self.cols.push(col);
        self
    }

    /// Appends every column of `cols`.
    pub fn extend(&mut self, cols: &[Col]) -> &mut Self {
        self.cols.extend_from_slice(cols);
        self
    }

    /// One row without its newline: each cell padded to its column,
    /// separated by one space.
    pub fn row<S: AsRef<str>>(&self, cells: &[S]) -> String {
        let mut out = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            let cell = cell.as_ref();
            match self.cols.get(i) {
                Some(&Col::L(w)) => out.push_str(&format!("{cell:<w$}")),
                Some(&Col::R(w)) => out.push_str(&format!("{cell:>w$}")),
                None => out.push_str(cell),
            }
        }
        out
    }

    /// [`Layout::row`] with its newline.
    pub fn line<S: AsRef<str>>(&self, cells: &[S]) -> String {
        let mut s = self.row(cells);
        s.push('\n');
        s
    }
}

/// A Markdown table row: `| a | b |` and a newline.
pub fn md_row<S: AsRef<str>>(cells: &[S]) -> String {
    let cells: Vec<&str> = cells.iter().map(AsRef::as_ref).collect();
    format!("| {} |\n", cells.join(" | "))
}

/// A Markdown table's head: the names' row and the `---` row under it.
pub fn md_head(names: &[&str]) -> String {
    md_row(names) + &md_row(&vec!["---"; names.len()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_width_rows_pad_align_and_never_cut() {
        let l = Layout::new(&[5], &[4, 3]);
        assert_eq!(l.row(&["ab", "1", "22"]), "ab       1  22");
        assert_eq!(l.line(&["ab", "1", "22"]), "ab       1  22\n");
        // A wide cell pushes the rest right; nothing is cut.
        assert_eq!(l.row(&["abcdefg", "12345", "x"]), "abcdefg 12345   x");
        // Fewer cells: the row ends; more cells: printed as they are.
        assert_eq!(l.row(&["a"]), "a    ");
        assert_eq!(l.row(&["a", "b", "c", "extra"]), "a        b   c extra");
        assert_eq!(l.row::<&str>(&[]), "");
    }

    #[test]
    fn a_layout_is_the_format_string_it_replaces() {
        let mut l = Layout::new(&[12], &[11]);
        l.push(Col::R(10)).extend(&[Col::R(8), Col::L(3)]);
        let cells = ["steer", "1234", "0.50", "-", "x"];
        assert_eq!(
            l.row(&cells),
            format!(
                "{:<12} {:>11} {:>10} {:>8} {:<3}",
                cells[0], cells[1], cells[2], cells[3], cells[4]
            )
        );
        let owned: Vec<String> = cells.iter().map(|c| c.to_string()).collect();
        assert_eq!(l.row(&owned), l.row(&cells));
    }

    #[test]
    fn markdown_rows_and_heads() {
        assert_eq!(md_row(&["a", "b"]), "| a | b |\n");
        assert_eq!(
            md_head(&["x", "y", "z"]),
            "| x | y | z |\n| --- | --- | --- |\n"
        );
        assert_eq!(md_row(&[String::from("only")]), "| only |\n");
    }
}
