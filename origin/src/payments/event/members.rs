//! The one pass over a Stripe event's body that `super::parse` reads it with: only the members
//! it acts on (`id`, `type`, `data.object.metadata.order_id`, `data.object.payment_status`,
//! `data.object.refunded`, [`EventMembers`] and below), borrowed where they have no escapes;
//! every other member skipped unbuilt ([`IgnoredAny`]), with the answers of reading the whole
//! body as a JSON value.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// A JSON value of which only strings and booleans matter; anything else is skipped unbuilt.
/// A string without escapes is borrowed from the body.
#[derive(Debug, Default)]
pub(super) enum Scalar<'de> {
    Str(Cow<'de, str>),
    Bool(bool),
    /// A number, `null`, an array, an object — or the member is absent.
    #[default]
    Other,
}

impl Scalar<'_> {
    pub(super) fn as_str(&self) -> Option<&str> {
        match self {
            Self::Str(s) => Some(s),
            _ => None,
        }
    }
}

impl<'de> Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Owned(v.to_owned())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
        Ok(Scalar::Str(Cow::Owned(v)))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Scalar::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Scalar::Other)
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Scalar::Other)
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Scalar::Other)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Scalar::Other)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Scalar::Other)
    }
}

/// The members of a JSON object that one level of the event needs.
pub(super) trait Members<'de>: Default {
    /// Reads the value of member `key` (or skips it).
    fn member<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

/// A JSON value that matters only when it is an object: `Some` of its members, else `None`
/// (skipped unbuilt).
pub(super) struct Object<T>(pub(super) Option<T>);

impl<T> Default for Object<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<'de, T: Members<'de>> Deserialize<'de> for Object<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ObjectVisitor(PhantomData))
    }
}

struct ObjectVisitor<T>(PhantomData<T>);

impl<'de, T: Members<'de>> Visitor<'de> for ObjectVisitor<T> {
    type Value = Object<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = T::default();
        while let Some(key) = map.next_key::<Scalar<'de>>()? {
            match key.as_str() {
                Some(key) => members.member(key, &mut map)?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(Object(Some(members)))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Object(None))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Object(None))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Object(None))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Object(None))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Object(None))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Object(None))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(Object(None))
    }
}

/// Skips the value of a member no level needs.
fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
    map.next_value::<IgnoredAny>().map(drop)
}

/// The event: `{"id", "type", "data"}`.
#[derive(Default)]
pub(super) struct EventMembers<'de> {
    pub(super) id: Scalar<'de>,
    pub(super) kind: Scalar<'de>,
    pub(super) data: Object<DataMembers<'de>>,
}

impl<'de> Members<'de> for EventMembers<'de> {
    fn member<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "id" => self.id = map.next_value()?,
            "type" => self.kind = map.next_value()?,
            "data" => self.data = map.next_value()?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// `data`: `{"object"}`.
#[derive(Default)]
pub(super) struct DataMembers<'de> {
    pub(super) object: Object<ObjectMembers<'de>>,
}

impl<'de> Members<'de> for DataMembers<'de> {
    fn member<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "object" => self.object = map.next_value()?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// `data.object`: `{"metadata", "payment_status", "refunded"}`.
#[derive(Default)]
pub(super) struct ObjectMembers<'de> {
    pub(super) metadata: Object<MetadataMembers<'de>>,
    pub(super) payment_status: Scalar<'de>,
    pub(super) refunded: Scalar<'de>,
}

impl<'de> Members<'de> for ObjectMembers<'de> {
    fn member<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "metadata" => self.metadata = map.next_value()?,
            "payment_status" => self.payment_status = map.next_value()?,
            "refunded" => self.refunded = map.next_value()?,
            _ => skip(map)?,
        }
        Ok(())
    }
}

/// `data.object.metadata`: `{"order_id"}`.
#[derive(Default)]
pub(super) struct MetadataMembers<'de> {
    pub(super) order_id: Scalar<'de>,
}

impl<'de> Members<'de> for MetadataMembers<'de> {
    fn member<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error> {
        match key {
            "order_id" => self.order_id = map.next_value()?,
            _ => skip(map)?,
        }
        Ok(())
    }
}
