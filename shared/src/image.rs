//! Decoding a borrowed item image (a stream record's `NewImage`, an item a `Query` returned)
//! into a serde type.
//!
//! `serde_dynamo::from_item` takes the item by value: a caller that must keep the record (the
//! stream relay keeps it whole for the dead-letter queue and the batch response) has to clone the
//! whole map first, every key and every value, and `from_item` then rebuilds the map once more.
//! For a writer-shaped outbox image, the clone and the rebuild are two thirds of the relay's CPU
//! per event.
//!
//! [`from_image`] reads the map through a reference, so the only allocations left are the decoded
//! type's own. It reads either representation of an attribute value ([`Attribute`]): the stream
//! relay's `serde_dynamo::AttributeValue` (a Lambda event's image) and the SDK's
//! `aws_sdk_dynamodb::types::AttributeValue` (the poller's `Query` pages), so both relays decode
//! an outbox item with this one decoder. It follows `serde_dynamo`'s data model
//! (strings from `S`, numbers parsed from `N`, `Null` as `None`, unit enum variants from `S`,
//! maps from `M`, sequences from `L`, `SS`, `NS`, `BS`); a property test keeps it decoding
//! [`crate::OutboxItem`] exactly as `serde_dynamo::from_item` does. Errors name the attribute.

use std::collections::HashMap;
use std::fmt;

use aws_sdk_dynamodb::types::AttributeValue as SdkValue;
use aws_smithy_types::Blob;
use serde::de::value::{BorrowedStrDeserializer, MapAccessDeserializer};
use serde::de::{
    self, DeserializeSeed, Deserializer, IntoDeserializer, MapAccess, SeqAccess, Unexpected,
    Visitor,
};
use serde::forward_to_deserialize_any;
use serde_dynamo::AttributeValue;

/// Why an image does not decode into the requested type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ImageError {
    message: String,
}

impl de::Error for ImageError {
    fn custom<T: fmt::Display>(msg: T) -> Self {
        Self {
            message: msg.to_string(),
        }
    }

    // serde's own messages quote the value they saw; these name only its kind, since an
    // attribute's value may hold personal data and this message becomes a poison reason.

    fn invalid_type(unexpected: Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Self::custom(format_args!(
            "invalid type: {}, expected {expected}",
            kind_of(&unexpected)
        ))
    }

    fn invalid_value(unexpected: Unexpected<'_>, expected: &dyn de::Expected) -> Self {
        Self::custom(format_args!(
            "invalid value: {}, expected {expected}",
            kind_of(&unexpected)
        ))
    }

    fn unknown_variant(_variant: &str, expected: &'static [&'static str]) -> Self {
        Self::custom(format_args!(
            "unknown variant, expected one of {}",
            expected.join(", ")
        ))
    }
}

/// What `unexpected` is, without its value.
fn kind_of<'a>(unexpected: &'a Unexpected<'a>) -> &'a dyn fmt::Display {
    match unexpected {
        Unexpected::Bool(_) => &"a boolean",
        Unexpected::Unsigned(_) | Unexpected::Signed(_) | Unexpected::Float(_) => &"a number",
        Unexpected::Char(_) | Unexpected::Str(_) => &"a string",
        Unexpected::Bytes(_) => &"bytes",
        // The rest carry no value (a map, a unit, or this module's "number (N)").
        other => other,
    }
}

/// One attribute value as [`from_image`] reads it, whatever type holds it.
#[derive(Debug)]
pub enum View<'a, V: Attribute> {
    /// `S`.
    S(&'a str),
    /// `N`, as its text.
    N(&'a str),
    /// `B`.
    B(&'a [u8]),
    /// `BOOL`.
    Bool(bool),
    /// `NULL` (DynamoDB only ever sends `true`).
    Null(bool),
    /// `M`.
    M(&'a HashMap<String, V>),
    /// `L`.
    L(&'a [V]),
    /// `SS`.
    Ss(&'a [String]),
    /// `NS`, as their texts.
    Ns(&'a [String]),
    /// `BS`.
    Bs(&'a [V::Bytes]),
    /// A type added to DynamoDB after this SDK was built.
    Unknown,
}

// Not derived: a derive would ask `V: Copy`, and a view holds only references.
impl<V: Attribute> Clone for View<'_, V> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<V: Attribute> Copy for View<'_, V> {}

/// A representation of a DynamoDB attribute value that [`from_image`] reads.
pub trait Attribute: Sized {
    /// How the type holds a binary value.
    type Bytes: AsRef<[u8]>;

    /// The value, borrowed.
    fn view(&self) -> View<'_, Self>;
}

impl Attribute for AttributeValue {
    type Bytes = Vec<u8>;

    fn view(&self) -> View<'_, Self> {
        match self {
            Self::S(s) => View::S(s),
            Self::N(n) => View::N(n),
            Self::B(b) => View::B(b),
            Self::Bool(b) => View::Bool(*b),
            Self::Null(b) => View::Null(*b),
            Self::M(m) => View::M(m),
            Self::L(l) => View::L(l),
            Self::Ss(ss) => View::Ss(ss),
            Self::Ns(ns) => View::Ns(ns),
            Self::Bs(bs) => View::Bs(bs),
        }
    }
}

impl Attribute for SdkValue {
    type Bytes = Blob;

    fn view(&self) -> View<'_, Self> {
        match self {
            Self::S(s) => View::S(s),
            Self::N(n) => View::N(n),
            Self::B(b) => View::B(b.as_ref()),
            Self::Bool(b) => View::Bool(*b),
            Self::Null(b) => View::Null(*b),
            Self::M(m) => View::M(m),
            Self::L(l) => View::L(l),
            Self::Ss(ss) => View::Ss(ss),
            Self::Ns(ns) => View::Ns(ns),
            Self::Bs(bs) => View::Bs(bs),
            _ => View::Unknown,
        }
    }
}

/// Decodes `image` into `T` without taking it apart.
///
/// # Errors
/// [`ImageError`] naming the attribute that is missing, of the wrong type or malformed.
pub fn from_image<'de, T: de::Deserialize<'de>>(
    image: &'de HashMap<String, impl Attribute>,
) -> Result<T, ImageError> {
    T::deserialize(MapAccessDeserializer::new(Attributes::new(image)))
}

/// The attributes of a map (`M`, or the top-level item) as a serde map.
struct Attributes<'de, V> {
    entries: std::collections::hash_map::Iter<'de, String, V>,
    /// The attribute whose value comes next, for error messages.
    current: Option<(&'de str, &'de V)>,
}

impl<'de, V: Attribute> Attributes<'de, V> {
    fn new(map: &'de HashMap<String, V>) -> Self {
        Self {
            entries: map.iter(),
            current: None,
        }
    }
}

impl<'de, A: Attribute> MapAccess<'de> for Attributes<'de, A> {
    type Error = ImageError;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, ImageError> {
        let Some((name, value)) = self.entries.next() else {
            return Ok(None);
        };
        self.current = Some((name, value));
        seed.deserialize(BorrowedStrDeserializer::new(name))
            .map(Some)
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<S::Value, ImageError> {
        let (name, value) = self
            .current
            .take()
            .ok_or_else(|| de::Error::custom("attribute value requested before its name"))?;
        seed.deserialize(Attr::of(value)).map_err(|err| ImageError {
            message: format!("attribute {name}: {err}"),
        })
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.entries.len())
    }
}

/// An `N` attribute, named without its value.
const NUMBER: Unexpected<'static> = Unexpected::Other("number (N)");

/// One attribute value.
struct Attr<'de, A: Attribute>(View<'de, A>);

impl<'de, A: Attribute> Attr<'de, A> {
    fn of(value: &'de A) -> Self {
        Self(value.view())
    }

    fn unexpected(&self) -> Unexpected<'de> {
        match self.0 {
            View::N(_) => NUMBER,
            // Not the value itself: a misplaced string can be a whole payload, and this message
            // ends up in a dead letter's reason.
            View::S(_) => Unexpected::Other("string (S)"),
            View::Bool(b) => Unexpected::Bool(b),
            View::B(_) => Unexpected::Other("binary (B)"),
            View::Null(_) => Unexpected::Other("NULL"),
            View::M(_) => Unexpected::Map,
            View::L(_) => Unexpected::Seq,
            View::Ss(_) => Unexpected::Other("string set (SS)"),
            View::Ns(_) => Unexpected::Other("number set (NS)"),
            View::Bs(_) => Unexpected::Other("binary set (BS)"),
            View::Unknown => Unexpected::Other("an attribute type unknown to this SDK"),
        }
    }

    fn invalid_type<T>(&self, expected: &dyn de::Expected) -> Result<T, ImageError> {
        Err(de::Error::invalid_type(self.unexpected(), expected))
    }

    /// The text of an `N` attribute.
    fn number<V: Visitor<'de>>(&self, visitor: &V) -> Result<&'de str, ImageError> {
        match self.0 {
            View::N(n) => Ok(n),
            _ => self.invalid_type(visitor),
        }
    }
}

/// Parses an `N` attribute as the integer or float type the visitor asks for.
macro_rules! deserialize_number {
    ($($method:ident => $ty:ty, $visit:ident;)*) => {$(
        fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ImageError> {
            let text = self.number(&visitor)?;
            match text.parse::<$ty>() {
                Ok(n) => visitor.$visit(n),
                Err(_) => Err(de::Error::invalid_value(NUMBER, &visitor)),
            }
        }
    )*};
}

impl<'de, A: Attribute> Deserializer<'de> for Attr<'de, A> {
    type Error = ImageError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ImageError> {
        match self.0 {
            View::N(n) => visit_number(n, visitor),
            View::S(s) => visitor.visit_borrowed_str(s),
            View::Bool(b) => visitor.visit_bool(b),
            View::B(b) => visitor.visit_borrowed_bytes(b),
            // DynamoDB only ever sends `NULL: true`; `false` is malformed, as in serde_dynamo.
            View::Null(true) => visitor.visit_unit(),
            View::Null(false) | View::Unknown => self.invalid_type(&visitor),
            View::M(m) => visitor.visit_map(Attributes::new(m)),
            View::L(l) => visitor.visit_seq(Elements::new(l.iter().map(Attr::of))),
            View::Ss(ss) => visitor.visit_seq(Elements::new(
                ss.iter().map(|s| BorrowedStrDeserializer::new(s.as_str())),
            )),
            View::Ns(ns) => visitor.visit_seq(Elements::new(ns.iter().map(|n| Number(n)))),
            View::Bs(bs) => visitor.visit_seq(Elements::new(
                bs.iter()
                    .map(|b| de::value::BorrowedBytesDeserializer::new(b.as_ref())),
            )),
        }
    }

    deserialize_number! {
        deserialize_i8 => i8, visit_i8;
        deserialize_i16 => i16, visit_i16;
        deserialize_i32 => i32, visit_i32;
        deserialize_i64 => i64, visit_i64;
        deserialize_i128 => i128, visit_i128;
        deserialize_u8 => u8, visit_u8;
        deserialize_u16 => u16, visit_u16;
        deserialize_u32 => u32, visit_u32;
        deserialize_u64 => u64, visit_u64;
        deserialize_u128 => u128, visit_u128;
        deserialize_f32 => f32, visit_f32;
        deserialize_f64 => f64, visit_f64;
    }

    fn deserialize_bool<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ImageError> {
        match self.0 {
            View::Bool(b) => visitor.visit_bool(b),
            _ => self.invalid_type(&visitor),
        }
    }

    fn deserialize_str<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ImageError> {
        match self.0 {
            View::S(s) => visitor.visit_borrowed_str(s),
            _ => self.invalid_type(&visitor),
        }
    }

    fn deserialize_string<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ImageError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ImageError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ImageError> {
        self.deserialize_str(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ImageError> {
        match self.0 {
            View::B(b) => visitor.visit_borrowed_bytes(b),
            _ => self.invalid_type(&visitor),
        }
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ImageError> {
        self.deserialize_bytes(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ImageError> {
        match self.0 {
            View::Null(true) => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ImageError> {
        match self.0 {
            View::Null(true) => visitor.visit_unit(),
            _ => self.invalid_type(&visitor),
        }
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, ImageError> {
        self.deserialize_unit(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, ImageError> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ImageError> {
        match self.0 {
            View::L(_) | View::Ss(_) | View::Ns(_) | View::Bs(_) => self.deserialize_any(visitor),
            _ => self.invalid_type(&visitor),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, ImageError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, ImageError> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ImageError> {
        match self.0 {
            View::M(m) => visitor.visit_map(Attributes::new(m)),
            _ => self.invalid_type(&visitor),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ImageError> {
        match self.0 {
            View::L(_) => self.deserialize_seq(visitor),
            _ => self.deserialize_map(visitor),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, ImageError> {
        match self.0 {
            // A unit variant, as `serde_dynamo` writes it. Variants with data are stored as a
            // one-entry `M`; outbox items have none, so they are not read here.
            View::S(s) => visitor.visit_enum(s.into_deserializer()),
            _ => self.invalid_type(&visitor),
        }
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ImageError> {
        visitor.visit_unit()
    }
}

/// Visits an `N` attribute the way `serde_dynamo` does for self-describing targets: as an
/// unsigned, then signed integer, then a float.
fn visit_number<'de, V: Visitor<'de>>(text: &'de str, visitor: V) -> Result<V::Value, ImageError> {
    if let Ok(n) = text.parse::<u64>() {
        visitor.visit_u64(n)
    } else if let Ok(n) = text.parse::<i64>() {
        visitor.visit_i64(n)
    } else if let Ok(n) = text.parse::<f64>() {
        visitor.visit_f64(n)
    } else {
        Err(de::Error::invalid_value(NUMBER, &visitor))
    }
}

/// One member of a number set.
struct Number<'de>(&'de str);

impl<'de> Deserializer<'de> for Number<'de> {
    type Error = ImageError;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, ImageError> {
        visit_number(self.0, visitor)
    }

    forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
        unit unit_struct newtype_struct seq tuple tuple_struct map struct enum identifier
        ignored_any
    }
}

/// The members of a list or set as a serde sequence.
struct Elements<I> {
    items: I,
}

impl<I> Elements<I> {
    fn new(items: I) -> Self {
        Self { items }
    }
}

impl<'de, I, D> SeqAccess<'de> for Elements<I>
where
    I: ExactSizeIterator<Item = D>,
    D: Deserializer<'de, Error = ImageError>,
{
    type Error = ImageError;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, ImageError> {
        self.items
            .next()
            .map(|item| seed.deserialize(item))
            .transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.items.len())
    }
}

#[cfg(test)]
mod tests;
