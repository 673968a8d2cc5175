//! The header's text: the Python literal subset numpy writes, and the three fields it must
//! hold.

use std::fmt;

use super::error::{KindResult, NpyErrorKind, Printable};
use super::MAX_HEADER_DEPTH;

/// A parsed Python literal.
#[derive(Clone, Debug, PartialEq)]
pub(super) enum Lit {
    Str(String),
    /// An integer; `None` if it does not fit in a u64 (or is negative).
    Int(Option<u64>),
    Bool(bool),
    None,
    Tuple(Vec<Lit>),
    List(Vec<Lit>),
    Dict(Vec<(Lit, Lit)>),
}

impl fmt::Display for Lit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn seq(f: &mut fmt::Formatter<'_>, items: &[Lit], open: &str, close: &str) -> fmt::Result {
            f.write_str(open)?;
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                item.fmt(f)?;
            }
            if open == "(" && items.len() == 1 {
                f.write_str(",")?;
            }
            f.write_str(close)
        }
        match self {
            Lit::Str(s) => write!(f, "'{}'", Printable(s)),
            Lit::Int(Some(v)) => write!(f, "{v}"),
            Lit::Int(None) => f.write_str("<large or negative integer>"),
            Lit::Bool(true) => f.write_str("True"),
            Lit::Bool(false) => f.write_str("False"),
            Lit::None => f.write_str("None"),
            Lit::Tuple(items) => seq(f, items, "(", ")"),
            Lit::List(items) => seq(f, items, "[", "]"),
            Lit::Dict(items) => {
                f.write_str("{")?;
                for (i, (k, v)) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{k}: {v}")?;
                }
                f.write_str("}")
            }
        }
    }
}

/// The three fields of a header.
pub(super) struct Header {
    pub(super) descr: Lit,
    pub(super) fortran_order: bool,
    pub(super) shape: Vec<u64>,
}

fn header_error(reason: impl Into<String>) -> NpyErrorKind {
    NpyErrorKind::Header {
        reason: reason.into(),
    }
}

pub(super) fn parse_header(text: &[u8], utf8: bool) -> KindResult<Header> {
    let mut p = LitParser {
        s: text,
        pos: 0,
        utf8,
        depth: 0,
    };
    let value = p.value().map_err(header_error)?;
    p.skip_ws();
    if p.pos != text.len() {
        return Err(header_error(format!(
            "unexpected {} after the dict at byte {}",
            describe_byte(text[p.pos]),
            p.pos
        )));
    }
    let Lit::Dict(entries) = value else {
        return Err(header_error(format!("expected a dict, found {value}")));
    };
    let (mut descr, mut fortran_order, mut shape) = (None, None, None);
    for (key, value) in entries {
        let slot = match &key {
            Lit::Str(k) if k == "descr" => &mut descr,
            Lit::Str(k) if k == "fortran_order" => &mut fortran_order,
            Lit::Str(k) if k == "shape" => &mut shape,
            _ => return Err(header_error(format!("unexpected key {key}"))),
        };
        if slot.replace(value).is_some() {
            return Err(header_error(format!("key {key} appears twice")));
        }
    }
    let missing = |name: &str| header_error(format!("the key '{name}' is missing"));
    let descr = descr.ok_or_else(|| missing("descr"))?;
    let fortran_order = match fortran_order.ok_or_else(|| missing("fortran_order"))? {
        Lit::Bool(b) => b,
        other => {
            return Err(header_error(format!(
                "'fortran_order' is {other}, expected True or False"
            )))
        }
    };
    let shape = match shape.ok_or_else(|| missing("shape"))? {
        Lit::Tuple(items) => items
            .iter()
            .map(|d| match d {
                Lit::Int(Some(v)) => Ok(*v),
                other => Err(header_error(format!(
                    "shape dimension {other} is not an integer in [0, 2^64)"
                ))),
            })
            .collect::<KindResult<Vec<u64>>>()?,
        other => {
            return Err(header_error(format!(
                "'shape' is {other}, expected a tuple of integers"
            )))
        }
    };
    Ok(Header {
        descr,
        fortran_order,
        shape,
    })
}

fn describe_byte(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}'", b as char)
    } else {
        format!("byte 0x{b:02x}")
    }
}

struct LitParser<'a> {
    s: &'a [u8],
    pos: usize,
    utf8: bool,
    depth: usize,
}

impl LitParser<'_> {
    fn peek(&self) -> Option<u8> {
        self.s.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r' | b'\x0c')) {
            self.pos += 1;
        }
    }

    fn unexpected(&self) -> String {
        match self.peek() {
            Some(b) => format!("unexpected {} at byte {}", describe_byte(b), self.pos),
            None => "unexpected end of the header".to_string(),
        }
    }

    fn eat(&mut self, b: u8) -> bool {
        self.skip_ws();
        if self.peek() == Some(b) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn value(&mut self) -> Result<Lit, String> {
        self.skip_ws();
        match self.peek() {
            Some(b'{') => self.nested(|p| p.dict()),
            Some(b'(') => self.nested(|p| p.tuple()),
            Some(b'[') => self.nested(|p| {
                p.pos += 1;
                p.items(b']').map(Lit::List)
            }),
            Some(b'\'' | b'"') => self.string(),
            Some(b'u' | b'U' | b'b' | b'B')
                if matches!(self.s.get(self.pos + 1), Some(b'\'' | b'"')) =>
            {
                self.pos += 1;
                self.string()
            }
            Some(b'-' | b'+' | b'0'..=b'9') => self.int(),
            Some(b) if b.is_ascii_alphabetic() || b == b'_' => self.name(),
            _ => Err(self.unexpected()),
        }
    }

    fn nested(&mut self, f: impl FnOnce(&mut Self) -> Result<Lit, String>) -> Result<Lit, String> {
        self.depth += 1;
        if self.depth > MAX_HEADER_DEPTH {
            return Err(format!("brackets nested more than {MAX_HEADER_DEPTH} deep"));
        }
        let v = f(self);
        self.depth -= 1;
        v
    }

    /// Comma-separated values up to `close`; the bool is whether a comma was seen.
    fn items_commas(&mut self, close: u8) -> Result<(Vec<Lit>, bool), String> {
        let mut items = Vec::new();
        let mut comma = false;
        loop {
            if self.eat(close) {
                return Ok((items, comma));
            }
            items.push(self.value()?);
            if self.eat(b',') {
                comma = true;
            } else if self.eat(close) {
                return Ok((items, comma));
            } else {
                return Err(self.unexpected());
            }
        }
    }

    fn items(&mut self, close: u8) -> Result<Vec<Lit>, String> {
        self.items_commas(close).map(|(items, _)| items)
    }

    fn tuple(&mut self) -> Result<Lit, String> {
        self.pos += 1;
        let (mut items, comma) = self.items_commas(b')')?;
        // `(3)` is the integer 3 in Python; a tuple needs a comma or no items.
        if items.len() == 1 && !comma {
            return Ok(items.remove(0));
        }
        Ok(Lit::Tuple(items))
    }

    fn dict(&mut self) -> Result<Lit, String> {
        self.pos += 1;
        let mut entries = Vec::new();
        loop {
            if self.eat(b'}') {
                return Ok(Lit::Dict(entries));
            }
            let key = self.value()?;
            if !self.eat(b':') {
                return Err(self.unexpected());
            }
            let value = self.value()?;
            entries.push((key, value));
            if !self.eat(b',') {
                if self.eat(b'}') {
                    return Ok(Lit::Dict(entries));
                }
                return Err(self.unexpected());
            }
        }
    }

    fn string(&mut self) -> Result<Lit, String> {
        let quote = self.s[self.pos];
        let start = self.pos;
        self.pos += 1;
        let mut bytes = Vec::new();
        loop {
            let Some(b) = self.peek() else {
                return Err(format!("string opened at byte {start} is not closed"));
            };
            self.pos += 1;
            match b {
                _ if b == quote => break,
                b'\n' => return Err(format!("string opened at byte {start} is not closed")),
                b'\\' => {
                    let Some(e) = self.peek() else {
                        return Err(format!("string opened at byte {start} is not closed"));
                    };
                    self.pos += 1;
                    match e {
                        b'\\' | b'\'' | b'"' => bytes.push(e),
                        b'n' => bytes.push(b'\n'),
                        b't' => bytes.push(b'\t'),
                        b'r' => bytes.push(b'\r'),
                        b'0' => bytes.push(0),
                        b'x' => {
                            let hex = self
                                .s
                                .get(self.pos..self.pos + 2)
                                .and_then(|h| std::str::from_utf8(h).ok())
                                .and_then(|h| u8::from_str_radix(h, 16).ok())
                                .ok_or_else(|| format!("bad \\x escape at byte {}", self.pos))?;
                            self.pos += 2;
                            bytes.push(hex);
                        }
                        other => {
                            return Err(format!(
                                "unsupported escape \\{} at byte {}",
                                other.escape_ascii(),
                                self.pos - 1
                            ))
                        }
                    }
                }
                _ => bytes.push(b),
            }
        }
        let text = if self.utf8 {
            String::from_utf8(bytes)
                .map_err(|_| format!("string at byte {start} is not valid UTF-8"))?
        } else {
            // Versions 1.0 and 2.0 store the header as latin-1.
            bytes.iter().map(|&b| b as char).collect()
        };
        Ok(Lit::Str(text))
    }

    fn int(&mut self) -> Result<Lit, String> {
        let negative = match self.peek() {
            Some(b'-') => {
                self.pos += 1;
                true
            }
            Some(b'+') => {
                self.pos += 1;
                false
            }
            _ => false,
        };
        let start = self.pos;
        let mut value: Option<u64> = Some(0);
        while let Some(d @ b'0'..=b'9') = self.peek() {
            value = value
                .and_then(|v| v.checked_mul(10))
                .and_then(|v| v.checked_add(u64::from(d - b'0')));
            self.pos += 1;
        }
        if self.pos == start {
            return Err(self.unexpected());
        }
        // Python 2 wrote long integers with an `L` suffix.
        if matches!(self.peek(), Some(b'L' | b'l')) {
            self.pos += 1;
        }
        if negative && value != Some(0) {
            value = None;
        }
        Ok(Lit::Int(value))
    }

    fn name(&mut self) -> Result<Lit, String> {
        let start = self.pos;
        while matches!(self.peek(), Some(b) if b.is_ascii_alphanumeric() || b == b'_') {
            self.pos += 1;
        }
        match &self.s[start..self.pos] {
            b"True" => Ok(Lit::Bool(true)),
            b"False" => Ok(Lit::Bool(false)),
            b"None" => Ok(Lit::None),
            other => Err(format!(
                "unexpected name '{}' at byte {start}",
                other.escape_ascii()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::npy::test_support::*;
    use crate::npy::*;

    #[test]
    fn malformed_headers() {
        let cases = [
            "[1, 2]",
            "{'descr': '<f4', 'fortran_order': False}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (), 'extra': 1}",
            "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': ()}",
            "{'descr': '<f4', 'fortran_order': 0, 'shape': ()}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': [2]}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,)}",
            "{'descr': '<f4', 'fortran_order': Flase, 'shape': ()}",
            "{'descr': '<f4, 'fortran_order': False, 'shape': ()}",
            "{'descr': '<f4' 'fortran_order': False, 'shape': ()}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': ()} x",
            "{'descr': '<f4', 'fortran_order': False, 'shape': ()}\0",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (",
            "",
        ];
        for text in cases {
            let bytes = image((1, 0), text, &[]);
            let reason = header_reason(&bytes);
            assert!(!reason.is_empty(), "{text}");
        }
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        let reason = header_reason(&image((2, 0), &deep, &[]));
        assert!(reason.contains("nested"), "{reason}");
    }

    #[test]
    fn versions_2_and_3_and_python_spellings() {
        let payload = 7i32.to_le_bytes();
        for version in [(1, 0), (2, 0), (3, 0)] {
            let a = from_bytes(&image(version, &dict("<i4", "False", "(1,)"), &payload)).unwrap();
            assert_eq!(a.tensor.to_vec::<i32>().unwrap(), [7]);
        }
        // Python 2 longs, double quotes, odd spacing, key order, no trailing comma.
        let text = "{\"shape\":(1L,),'fortran_order' :False ,  'descr':u'<i4'}";
        let a = from_bytes(&image((1, 0), text, &payload)).unwrap();
        assert_eq!(a.tensor.shape(), [1]);
        // Version 3.0 headers are UTF-8; 1.0 headers are latin-1 (a non-ASCII byte is a char).
        let bad = image(
            (3, 0),
            &dict("<i4", "False", "(1,)").replace("<i4", "<\u{e9}4"),
            &payload,
        );
        assert!(matches!(
            kind_of(&bad),
            NpyErrorKind::UnsupportedDType { .. }
        ));
    }
}
