//! A message's content: a text, or a list of typed parts (text and images).

use std::borrow::Cow;
use std::fmt;

use super::*;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::ser::Serializer;
use serde::{Deserialize, Serialize};

/// Where an image a tool returned stood in its result's text, for an upstream whose tool results
/// hold only text (OpenAI's, Gemini's): the image goes to the model right after the results.
pub const TOOL_IMAGE_MARK: &str = "[image: attached after the tool results]";

#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    Text(Text),
    Parts(Vec<ContentPart>),
}

impl Content {
    /// All text parts joined (image parts are skipped).
    pub fn text(&self) -> Cow<'_, str> {
        match self {
            Self::Text(t) => t.as_str(),
            Self::Parts(parts) => {
                let mut out = String::new();
                for p in parts {
                    if let ContentPart::Text { text } = p {
                        out.push_str(&text.as_str());
                    }
                }
                Cow::Owned(out)
            }
        }
    }

    /// Whether it holds any text.
    pub fn has_text(&self) -> bool {
        match self {
            Self::Text(t) => !t.is_empty(),
            Self::Parts(parts) => parts.iter().any(|p| matches!(p, ContentPart::Text { text } if !text.is_empty())),
        }
    }

    /// Whether any part is an image.
    pub fn has_images(&self) -> bool {
        self.images().next().is_some()
    }

    /// Its image parts, in order.
    pub fn images(&self) -> impl Iterator<Item = &ImageUrl> {
        let parts = match self {
            Self::Text(_) => &[][..],
            Self::Parts(parts) => parts.as_slice(),
        };
        parts.iter().filter_map(|p| match p {
            ContentPart::ImageUrl { image_url } => Some(image_url),
            ContentPart::Text { .. } => None,
        })
    }

    /// A tool result's text for an upstream whose tool results hold only text: its parts a line
    /// each, an image as `TOOL_IMAGE_MARK` (the encoder sends the image itself after the results).
    pub fn text_marking_images(&self) -> Cow<'_, str> {
        match self {
            Self::Parts(parts) if self.has_images() => {
                let lines: Vec<Cow<'_, str>> = parts
                    .iter()
                    .map(|p| match p {
                        ContentPart::Text { text } => text.as_str(),
                        ContentPart::ImageUrl { .. } => Cow::Borrowed(TOOL_IMAGE_MARK),
                    })
                    .collect();
                Cow::Owned(lines.join("\n"))
            }
            _ => self.text(),
        }
    }

    /// All text parts joined, as an encoder writes them.
    pub fn text_out(&self) -> TextOut<'_> {
        match self {
            Self::Text(t) => t.out(),
            Self::Parts(_) => TextOut::Plain(self.text()),
        }
    }
}

impl Serialize for Content {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Text(t) => t.serialize(s),
            Self::Parts(p) => p.serialize(s),
        }
    }
}

/// A string or content parts, decoded (the oracles' and the tests' serde reads; the walks keep
/// texts as the caller's literals).
impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Decoded;
        impl<'de> Visitor<'de> for Decoded {
            type Value = Content;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an array of content parts")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Content, E> {
                Ok(Content::Text(Text::new(v)))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Content, A::Error> {
                let mut parts = Vec::with_capacity(seq.size_hint().unwrap_or(1));
                while let Some(p) = seq.next_element()? {
                    parts.push(p);
                }
                Ok(Content::Parts(parts))
            }
        }
        d.deserialize_any(Decoded)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentPart {
    Text { text: Text },
    ImageUrl { image_url: ImageUrl },
}

/// By hand rather than serde's internally tagged enum, which buffers each part and copies its
/// text: the text is kept as the caller's literal (`Text`). Fields besides `type` and the
/// variant's own are passed over, as the derive did.
impl<'de> Deserialize<'de> for ContentPart {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(field_identifier, rename_all = "snake_case")]
        enum Field {
            Type,
            Text,
            ImageUrl,
            #[serde(other)]
            Other,
        }
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ContentPart;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a content part")
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<ContentPart, A::Error> {
                let (mut kind, mut text, mut image_url) = (None::<String>, None::<Text>, None::<ImageUrl>);
                while let Some(field) = map.next_key()? {
                    match field {
                        Field::Type => kind = Some(map.next_value()?),
                        Field::Text => text = Some(map.next_value()?),
                        Field::ImageUrl => image_url = Some(map.next_value()?),
                        Field::Other => {
                            map.next_value::<de::IgnoredAny>()?;
                        }
                    }
                }
                match kind.as_deref() {
                    Some("text") => {
                        Ok(ContentPart::Text { text: text.ok_or_else(|| de::Error::missing_field("text"))? })
                    }
                    Some("image_url") => Ok(ContentPart::ImageUrl {
                        image_url: image_url.ok_or_else(|| de::Error::missing_field("image_url"))?,
                    }),
                    Some(other) => Err(de::Error::unknown_variant(other, &["text", "image_url"])),
                    None => Err(de::Error::missing_field("type")),
                }
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImageUrl {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl ImageUrl {
    /// `(media_type, base64_data)` of a `data:` URL.
    pub fn as_data(&self) -> Option<(&str, &str)> {
        let rest = self.url.strip_prefix("data:")?;
        let (meta, data) = rest.split_once(',')?;
        let media = meta.strip_suffix(";base64")?;
        Some((media, data))
    }
}
