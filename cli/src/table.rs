//! Tables as `courierctl` prints them, through comfy-table.
//!
//! The preset is `NOTHING`: no borders and no lines, only columns, two spaces apart. The output is
//! the same bytes whether stdout is a terminal, a pipe or a file: plain text with no box-drawing
//! characters to strip, each row one line whose fields `awk`, `cut` and `grep` split on
//! whitespace, as the hand-aligned tables before it. Column widths follow the content and cells
//! are never wrapped or truncated (`ContentArrangement::Disabled`), so ids are printed whole,
//! ready to be copied into the next command, however narrow the terminal.

use std::io::Write;

pub use comfy_table::{Cell, CellAlignment, Table};
use comfy_table::{ContentArrangement, presets};

/// An empty table with `header` (no header row when it is empty).
pub fn new(header: &[&str]) -> Table {
    let mut table = Table::new();
    table
        .load_style(presets::NOTHING)
        // No terminal width lookup and no styling: the same output on a terminal and in a pipe.
        .force_no_tty()
        .set_content_arrangement(ContentArrangement::Disabled);
    if !header.is_empty() {
        table.set_header(header.to_vec());
    }
    table
}

/// A cell aligned to the right (counts, ages).
pub fn right(content: impl ToString) -> Cell {
    Cell::new(content).set_alignment(CellAlignment::Right)
}

/// The table's lines: columns flush left, two spaces apart, no trailing spaces.
pub fn lines(table: &mut Table) -> Vec<String> {
    let last = table.column_iter().count().saturating_sub(1);
    for (i, column) in table.column_iter_mut().enumerate() {
        column.set_padding((0, if i == last { 0 } else { 2 }));
    }
    table
        .lines()
        .map(|line| line.trim_end().to_owned())
        .collect()
}

/// Writes the table's [`lines`], each after `indent`.
pub fn write(out: &mut dyn Write, table: &mut Table, indent: &str) -> std::io::Result<()> {
    for line in lines(table) {
        writeln!(out, "{indent}{line}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_aligned_without_borders_or_trailing_spaces() {
        let mut t = new(&["ID", "AGE", "REASON"]);
        t.add_row(vec![Cell::new("a-long-id"), right("3h"), Cell::new("why")]);
        t.add_row(vec![Cell::new("b"), right("12d"), Cell::new("")]);
        assert_eq!(
            lines(&mut t),
            [
                "ID         AGE  REASON",
                "a-long-id   3h  why",
                "b          12d",
            ]
        );
        let mut out = Vec::new();
        write(&mut out, &mut t, "  ").unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "  ID         AGE  REASON\n  a-long-id   3h  why\n  b          12d\n"
        );
    }

    #[test]
    fn cells_are_never_wrapped_or_truncated() {
        let id = format!("{}#0123456789abcdef#g12#retries_exhausted", "m".repeat(300));
        let mut t = new(&[]);
        t.add_row(vec![Cell::new(&id), Cell::new("x")]);
        assert_eq!(lines(&mut t), [format!("{id}  x")]);
    }
}
