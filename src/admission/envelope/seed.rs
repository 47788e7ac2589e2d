//! The serde seeds the one-pass read is made of: one object of the envelope read by its
//! [`MapRead`], keys borrowed with where they stand in the body, `null`-able values.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};

/// What every map of the envelope is read with: the body (for where the pod's text stands)
/// and whether a namespace asks for injection.
#[derive(Clone, Copy)]
pub(super) struct Read<'s, 'a> {
    pub body: &'a [u8],
    pub namespace_asks: &'s dyn Fn(&str) -> bool,
}

/// One JSON object of the envelope: how its members are read, and into what.
pub(super) trait MapRead<'de> {
    type Value;
    /// What serde says it expected when the value is not an object.
    const EXPECTING: &'static str;
    fn visit<M: MapAccess<'de>>(read: Read<'_, 'de>, map: M) -> Result<Self::Value, M::Error>;
}

/// The seed that reads one object of kind `R`.
pub(super) struct Seed<'s, 'a, R> {
    read: Read<'s, 'a>,
    object: PhantomData<R>,
}

impl<'s, 'a, R> Seed<'s, 'a, R> {
    pub fn new(read: Read<'s, 'a>) -> Self {
        Seed {
            read,
            object: PhantomData,
        }
    }
}

impl<'de, R: MapRead<'de>> DeserializeSeed<'de> for Seed<'_, 'de, R> {
    type Value = R::Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<R::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, R: MapRead<'de>> Visitor<'de> for Seed<'_, 'de, R> {
    type Value = R::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(R::EXPECTING)
    }

    fn visit_map<M: MapAccess<'de>>(self, map: M) -> Result<R::Value, M::Error> {
        R::visit(self.read, map)
    }
}

/// A field seen twice is an error, as the plain read makes it.
pub(super) fn set<T, E: de::Error>(slot: &mut Option<T>, value: T) -> Result<(), E> {
    if slot.is_some() {
        return Err(E::custom("duplicate field"));
    }
    *slot = Some(value);
    Ok(())
}

/// A map key, and whether it was read straight from the body (no escapes): then where it
/// stands tells where its value starts and the value before it ends.
pub(super) struct Key<'de> {
    pub text: &'de str,
    borrowed: bool,
}

impl Key<'_> {
    /// The key's offset in `body`, when it was read from it.
    pub fn offset(&self, body: &[u8]) -> Option<usize> {
        if !self.borrowed {
            return None;
        }
        let at = (self.text.as_ptr() as usize).checked_sub(body.as_ptr() as usize)?;
        (at + self.text.len() <= body.len()).then_some(at)
    }
}

pub(super) struct KeySeed;

impl<'de> DeserializeSeed<'de> for KeySeed {
    type Value = Key<'de>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Key<'de>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeySeed {
    type Value = Key<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a key")
    }

    fn visit_borrowed_str<E>(self, text: &'de str) -> Result<Key<'de>, E> {
        Ok(Key {
            text,
            borrowed: true,
        })
    }

    // An escaped key: the one-pass read gives up (the plain read takes it).
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Key<'de>, E> {
        Err(E::custom("escaped key"))
    }
}

/// `Option<T>` read with a seed.
pub(super) struct OptionSeed<S>(pub S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for OptionSeed<S> {
    type Value = Option<S::Value>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, S: DeserializeSeed<'de>> Visitor<'de> for OptionSeed<S> {
    type Value = Option<S::Value>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("null or a value")
    }

    fn visit_none<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(None)
    }

    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        self.0.deserialize(d).map(Some)
    }
}
