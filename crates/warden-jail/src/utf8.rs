//! [`Utf8Carry`]: output chunks decoded as UTF-8 across chunk boundaries. One self-contained
//! item (its own file), so that a shared decoder can replace it in one line.

/// Decodes output chunks as UTF-8 across chunk boundaries: a character split between two
/// reads is held back until it is whole.
#[derive(Debug, Default)]
pub(crate) struct Utf8Carry(Vec<u8>);

impl Utf8Carry {
    pub(crate) fn push(&mut self, chunk: &[u8]) -> String {
        self.0.extend_from_slice(chunk);
        let valid_up_to = match std::str::from_utf8(&self.0) {
            Ok(_) => self.0.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            Err(_) => self.0.len(),
        };
        let rest = self.0.split_off(valid_up_to);
        let text = String::from_utf8_lossy(&self.0).into_owned();
        self.0 = rest;
        text
    }
}

#[cfg(test)]
mod tests {
    use super::Utf8Carry;

    #[test]
    fn split_characters_are_held_until_whole() {
        let mut c = Utf8Carry::default();
        let euro = "€".as_bytes();
        assert_eq!(c.push(&euro[..1]), "");
        assert_eq!(c.push(&euro[1..]), "€");
        assert_eq!(c.push(b"\xff ok"), "\u{fffd} ok");
    }
}
