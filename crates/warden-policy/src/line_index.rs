//! Byte offsets (what the parser reports) to 1-based lines and columns (what a person reads).
//!
//! Invariants: lines end at `\n`, `\r\n` or a lone `\r`, as Python's tokenizer has them;
//! columns count characters (Unicode scalar values), not bytes, so a column after `"é"` is the
//! one an editor shows; a leading byte-order mark is not a column. An offset past the end or
//! inside a character is clamped to the nearest character boundary before it.

/// The start offsets of every line of one source text.
#[derive(Debug, Clone)]
pub(crate) struct LineIndex<'a> {
    source: &'a str,
    line_starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    pub(crate) fn new(source: &'a str) -> Self {
        let bytes = source.as_bytes();
        let mut line_starts = vec![0];
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\n' => line_starts.push(i + 1),
                b'\r' if bytes.get(i + 1) == Some(&b'\n') => {
                    line_starts.push(i + 2);
                    i += 1;
                }
                b'\r' => line_starts.push(i + 1),
                _ => {}
            }
            i += 1;
        }
        Self {
            source,
            line_starts,
        }
    }

    /// The 1-based (line, column) of the byte `offset`.
    pub(crate) fn line_column(&self, offset: usize) -> (u32, u32) {
        let mut offset = offset.min(self.source.len());
        while !self.source.is_char_boundary(offset) {
            offset -= 1;
        }
        // The last line start at or before `offset`.
        let line = self.line_starts.partition_point(|&start| start <= offset) - 1;
        let mut start = self.line_starts[line];
        if start == 0 && self.source.starts_with('\u{feff}') {
            start = '\u{feff}'.len_utf8().min(offset);
        }
        let column = self.source[start..offset].chars().count() + 1;
        (saturating_u32(line + 1), saturating_u32(column))
    }
}

fn saturating_u32(value: usize) -> u32 {
    u32::try_from(value).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_character_is_line_1_column_1() {
        assert_eq!(LineIndex::new("").line_column(0), (1, 1));
        assert_eq!(LineIndex::new("abc").line_column(0), (1, 1));
        assert_eq!(LineIndex::new("abc").line_column(2), (1, 3));
        assert_eq!(LineIndex::new("abc").line_column(3), (1, 4));
    }

    #[test]
    fn every_line_ending_counts() {
        let index = LineIndex::new("a\nb\r\nc\rd");
        assert_eq!(index.line_column(2), (2, 1));
        assert_eq!(index.line_column(3), (2, 2));
        assert_eq!(index.line_column(5), (3, 1));
        assert_eq!(index.line_column(7), (4, 1));
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        let source = "s = \"日本é\"; import os";
        let offset = source.find("os").unwrap();
        assert_eq!(LineIndex::new(source).line_column(offset), (1, 19));
        assert_eq!(source[..offset].chars().count() + 1, 19);
    }

    #[test]
    fn out_of_range_and_mid_character_offsets_are_clamped() {
        let index = LineIndex::new("é");
        assert_eq!(index.line_column(1), (1, 1));
        assert_eq!(index.line_column(100), (1, 2));
    }

    #[test]
    fn a_byte_order_mark_is_not_a_column() {
        let source = "\u{feff}import os";
        let index = LineIndex::new(source);
        assert_eq!(index.line_column(source.find("os").unwrap()), (1, 8));
        assert_eq!(index.line_column(0), (1, 1));
    }
}
