//! GPT-2's byte <-> unicode map: byte-level BPE vocabularies spell every byte as a printable
//! character (printable Latin-1 bytes as themselves, the other 68 bytes as U+0100..U+0143 in
//! order), so decoding a token is mapping each character back to its byte.

/// Whether byte `b` is spelled as the character with the same code point.
fn maps_to_itself(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// Code point -> byte for every character of the map (index = code point, up to U+0143).
pub struct ByteLevelMap {
    char_to_byte: [Option<u8>; 324],
}

impl ByteLevelMap {
    pub fn new() -> Self {
        let mut char_to_byte = [None; 324];
        let mut next_extra = 256usize;
        for b in 0..=255u8 {
            if maps_to_itself(b) {
                char_to_byte[usize::from(b)] = Some(b);
            } else {
                char_to_byte[next_extra] = Some(b);
                next_extra += 1;
            }
        }
        ByteLevelMap { char_to_byte }
    }

    /// The bytes a byte-level token spells; like `tokenizers`, a token with any character
    /// outside the map decodes to its own UTF-8 bytes.
    pub fn token_bytes(&self, token: &str) -> Vec<u8> {
        let mapped: Option<Vec<u8>> = token
            .chars()
            .map(|c| self.char_to_byte.get(c as usize).copied().flatten())
            .collect();
        mapped.unwrap_or_else(|| token.as_bytes().to_vec())
    }
}

impl Default for ByteLevelMap {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_spellings() {
        let map = ByteLevelMap::new();
        assert_eq!(map.token_bytes("Ġhello"), b" hello");
        assert_eq!(map.token_bytes("Ċ"), b"\n");
        assert_eq!(map.token_bytes("Ã©"), "é".as_bytes());
        assert_eq!(map.token_bytes("ĉ"), b"\t");
        assert_eq!(map.token_bytes("中"), "中".as_bytes());
    }

    #[test]
    fn every_byte_has_one_character() {
        let map = ByteLevelMap::new();
        let mut seen = [false; 256];
        for b in map.char_to_byte.iter().flatten() {
            assert!(!seen[usize::from(*b)]);
            seen[usize::from(*b)] = true;
        }
        assert!(seen.iter().all(|s| *s));
    }
}
