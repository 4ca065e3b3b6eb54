//! Upstream API keys at rest: AES-256-GCM under the master key (`AX_MASTER_KEY`, 32 bytes,
//! base64), the upstream's name as associated data (a ciphertext cannot be moved to another row).
//! Each ciphertext names the master key that made it (`key_id`), so `rotate-master-key` can
//! re-encrypt everything from `AX_MASTER_KEY_PREVIOUS` to a new `AX_MASTER_KEY`.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use base64::Engine;
use sha2::{Digest, Sha256};

pub struct MasterKey {
    pub id: String,
    cipher: Aes256Gcm,
}

impl MasterKey {
    pub fn from_base64(b64: &str) -> Result<Self, String> {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64.trim())
            .map_err(|_| "the master key is not valid base64".to_owned())?;
        if bytes.len() != 32 {
            return Err(format!("the master key must be 32 bytes, got {}", bytes.len()));
        }
        let cipher = Aes256Gcm::new_from_slice(&bytes).map_err(|_| "bad master key length".to_owned())?;
        let id = hex::encode(&Sha256::digest(&bytes)[..6]);
        Ok(Self { id, cipher })
    }
}

/// The current master key and, during a rotation, the previous one.
pub struct MasterKeys {
    pub current: MasterKey,
    pub previous: Option<MasterKey>,
}

pub struct Sealed {
    pub key_id: String,
    pub nonce: Vec<u8>,
    pub ciphertext: Vec<u8>,
}

impl MasterKeys {
    pub fn from_env() -> Result<Self, String> {
        let current = std::env::var("AX_MASTER_KEY").map_err(|_| "AX_MASTER_KEY is not set".to_owned())?;
        let current = MasterKey::from_base64(&current)?;
        let previous = match std::env::var("AX_MASTER_KEY_PREVIOUS") {
            Ok(p) if !p.trim().is_empty() => Some(MasterKey::from_base64(&p)?),
            _ => None,
        };
        Ok(Self { current, previous })
    }

    pub fn seal(&self, plaintext: &[u8], aad: &str) -> Result<Sealed, String> {
        let nonce: [u8; 12] = rand::random();
        let ciphertext = self
            .current
            .cipher
            .encrypt(Nonce::from_slice(&nonce), Payload { msg: plaintext, aad: aad.as_bytes() })
            .map_err(|_| "encryption failed".to_owned())?;
        Ok(Sealed { key_id: self.current.id.clone(), nonce: nonce.to_vec(), ciphertext })
    }

    pub fn open(&self, key_id: &str, nonce: &[u8], ciphertext: &[u8], aad: &str) -> Result<Vec<u8>, String> {
        let key = [Some(&self.current), self.previous.as_ref()]
            .into_iter()
            .flatten()
            .find(|k| k.id == key_id)
            .ok_or_else(|| format!("encrypted under master key {key_id}, which is not configured"))?;
        if nonce.len() != 12 {
            return Err("bad nonce".to_owned());
        }
        key.cipher
            .decrypt(Nonce::from_slice(nonce), Payload { msg: ciphertext, aad: aad.as_bytes() })
            .map_err(|_| "decryption failed (wrong key or tampered ciphertext)".to_owned())
    }
}

/// Hex SHA-256: how tokens and API keys are stored.
pub fn digest(secret: &str) -> String {
    hex::encode(Sha256::digest(secret.as_bytes()))
}

/// A random URL-safe token of `bytes` random bytes.
pub fn token(bytes: usize) -> String {
    let raw: Vec<u8> = (0..bytes).map(|_| rand::random::<u8>()).collect();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(b: u8) -> MasterKeys {
        let k = base64::engine::general_purpose::STANDARD.encode([b; 32]);
        MasterKeys { current: MasterKey::from_base64(&k).unwrap(), previous: None }
    }

    #[test]
    fn seal_open_round_trips_and_binds_the_row() {
        let k = keys(1);
        let s = k.seal(b"sk-secret", "openai").unwrap();
        assert!(!s.ciphertext.windows(9).any(|w| w == b"sk-secret"));
        assert_eq!(k.open(&s.key_id, &s.nonce, &s.ciphertext, "openai").unwrap(), b"sk-secret");
        assert!(k.open(&s.key_id, &s.nonce, &s.ciphertext, "other").is_err());
        assert!(keys(2).open(&s.key_id, &s.nonce, &s.ciphertext, "openai").is_err());
    }

    #[test]
    fn rejects_short_keys() {
        assert!(MasterKey::from_base64("c2hvcnQ=").is_err());
    }
}
