//! expected.tsv: differences accepted with a reason. Any other difference fails the run.
//!
//! Format, one entry a line, tab-separated, `#` starts a comment line:
//! `case  versions  path  reason` where `case` and `path` are globs (`*` matches any text),
//! `versions` is `*`, `N` or `N-M`, and the reason is required (a Strand gap with its
//! issue, or why the difference is legitimate).

use anyhow::{bail, Context};

/// One accepted difference.
#[derive(Debug)]
pub struct Entry {
    /// Line in the file, for "unused entry" notes.
    pub line: usize,
    /// Case glob.
    pub case: String,
    /// Inclusive version range.
    pub versions: (i16, i16),
    /// Field path glob.
    pub path: String,
    /// Why.
    pub reason: String,
}

/// Parses the file's text.
pub fn parse(text: &str) -> anyhow::Result<Vec<Entry>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let cols: Vec<&str> = line.split('\t').collect();
        let [case, versions, path, reason] = cols[..] else {
            bail!(
                "expected.tsv:{line_no}: want 4 tab-separated columns, got {}",
                cols.len()
            );
        };
        if reason.trim().is_empty() {
            bail!("expected.tsv:{line_no}: an accepted difference needs a reason");
        }
        out.push(Entry {
            line: line_no,
            case: case.to_string(),
            versions: parse_versions(versions)
                .with_context(|| format!("expected.tsv:{line_no}"))?,
            path: path.to_string(),
            reason: reason.to_string(),
        });
    }
    Ok(out)
}

fn parse_versions(s: &str) -> anyhow::Result<(i16, i16)> {
    if s == "*" {
        return Ok((i16::MIN, i16::MAX));
    }
    if let Some((lo, hi)) = s.split_once('-') {
        return Ok((lo.parse()?, hi.parse()?));
    }
    let v = s.parse()?;
    Ok((v, v))
}

impl Entry {
    /// Whether this entry accepts a difference at `path` in `case` at `version`.
    pub fn accepts(&self, case: &str, version: i16, path: &str) -> bool {
        glob(&self.case, case)
            && (self.versions.0..=self.versions.1).contains(&version)
            && glob(&self.path, path)
    }
}

/// `*` matches any run of characters; everything else matches itself.
pub fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, rest) = parts.split_first().expect("split yields at least one part");
    let Some(mut tail) = text.strip_prefix(first) else {
        return false;
    };
    let Some((last, middle)) = rest.split_last() else {
        return tail.is_empty();
    };
    for part in middle {
        match tail.find(part) {
            Some(i) => tail = &tail[i + part.len()..],
            None => return false,
        }
    }
    tail.ends_with(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs() {
        assert!(glob("a*c", "abbc"));
        assert!(glob("*", ""));
        assert!(glob("topics[*].error_code", "topics[x].error_code"));
        assert!(!glob("a*c", "abcd"));
        assert!(glob("abc", "abc"));
        assert!(!glob("abc", "abcd"));
    }

    #[test]
    fn entries_need_reasons() {
        assert!(parse("x\t*\tp\t\n").is_err());
        let e = parse("# c\nfetch*\t4-9\ttopics[*].x\tStrand gap (issue 1)\n").expect("parses");
        assert!(e[0].accepts("fetch_ok", 5, "topics[a].x"));
        assert!(!e[0].accepts("fetch_ok", 10, "topics[a].x"));
    }
}
