//! Big-endian fields read from the front of a byte slice, for the decoders of what the
//! broker keeps itself (partition-state checkpoints, internal-topic records).
//!
//! Invariant: never panics; a field past the end is `None`; `items` checks a count against
//! the bytes left before the caller allocates for it.

/// A read position in a byte slice.
#[derive(Clone, Copy, Debug)]
pub struct Cursor<'a>(&'a [u8]);

impl<'a> Cursor<'a> {
    /// Reads from the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Cursor<'a> {
        Cursor(bytes)
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        self.0
    }

    /// The next `N` bytes.
    pub fn take<const N: usize>(&mut self) -> Option<[u8; N]> {
        let (head, rest) = self.0.split_first_chunk::<N>()?;
        self.0 = rest;
        Some(*head)
    }

    /// The next `n` bytes.
    pub fn slice(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    /// An int8.
    pub fn i8(&mut self) -> Option<i8> {
        self.take::<1>().map(i8::from_be_bytes)
    }

    /// An int16.
    pub fn i16(&mut self) -> Option<i16> {
        self.take::<2>().map(i16::from_be_bytes)
    }

    /// An int32.
    pub fn i32(&mut self) -> Option<i32> {
        self.take::<4>().map(i32::from_be_bytes)
    }

    /// An int64.
    pub fn i64(&mut self) -> Option<i64> {
        self.take::<8>().map(i64::from_be_bytes)
    }

    /// Whether `count` items of at least `item_bytes` each fit in the bytes left (a
    /// negative count never does).
    pub fn fits(&self, count: i64, item_bytes: usize) -> bool {
        usize::try_from(count).is_ok_and(|n| n.saturating_mul(item_bytes) <= self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_fields_and_stops_at_the_end() {
        let bytes = [0xff, 0, 1, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3, 9];
        let mut c = Cursor::new(&bytes);
        assert_eq!(c.i8(), Some(-1));
        assert_eq!(c.i16(), Some(1));
        assert_eq!(c.i32(), Some(2));
        assert_eq!(c.i64(), Some(3));
        assert!(c.fits(1, 1) && !c.fits(2, 1) && !c.fits(-1, 0));
        assert_eq!(c.i16(), None, "one byte left");
        assert_eq!(c.slice(1), Some(&[9u8][..]));
        assert_eq!(c.slice(1), None);
        assert!(c.rest().is_empty());
    }
}
