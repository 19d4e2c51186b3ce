//! Output formatting: aligned text tables (the layout of Kafka's shell tools) and JSON.
//!
//! Invariant: functions here are pure — they build strings and never print, so every
//! command's output is unit-testable; `main` decides where it goes.

/// A text table: a header row and data rows, each column padded to its widest cell.
#[derive(Debug, Default)]
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    /// A table with these column names.
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|s| s.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row; missing cells print empty, extra cells are kept.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Whether there are no data rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Renders the table; columns are separated by two spaces, trailing spaces trimmed.
    pub fn render(&self) -> String {
        let columns = self
            .rows
            .iter()
            .map(Vec::len)
            .chain([self.header.len()])
            .max()
            .unwrap_or(0);
        let mut widths = vec![0usize; columns];
        for row in std::iter::once(&self.header).chain(&self.rows) {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for row in std::iter::once(&self.header).chain(&self.rows) {
            let mut line = String::new();
            for (i, w) in widths.iter().enumerate() {
                let cell = row.get(i).map_or("", String::as_str);
                line.push_str(cell);
                if i + 1 < columns {
                    let pad = w.saturating_sub(cell.chars().count()) + 2;
                    line.extend(std::iter::repeat_n(' ', pad));
                }
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        out
    }
}

/// `-` for an absent value, as `kafka-consumer-groups.sh` prints.
pub fn or_dash(v: Option<impl ToString>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

/// Bytes as text: UTF-8 as is, anything else lossily (invalid sequences become U+FFFD).
pub fn text_of(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(header: &[&str], rows: &[&[&str]], expected: &str) {
        let mut t = Table::new(header);
        for r in rows {
            t.row(r.iter().map(|s| s.to_string()).collect());
        }
        assert_eq!(t.render(), expected);
    }

    #[test]
    fn tables_align_columns() {
        check(
            &["TOPIC", "PARTITION", "LAG"],
            &[&["orders", "0", "12"], &["t", "10", "-"]],
            "TOPIC   PARTITION  LAG\norders  0          12\nt       10         -\n",
        );
        check(&["A"], &[], "A\n");
        check(&["A", "B"], &[&["x"]], "A  B\nx\n");
    }

    #[test]
    fn absent_values_are_dashes() {
        assert_eq!(or_dash(None::<i64>), "-");
        assert_eq!(or_dash(Some(5)), "5");
        assert_eq!(text_of(b"h\xffi"), "h\u{fffd}i");
    }
}
