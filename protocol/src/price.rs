//! Prices in integer micro-USD: no floating point between the price list and the bill.
//!
//! Prices are configured in USD per million tokens and converted once, when a configuration is
//! validated, to integer micro-USD per million tokens (exact for prices with up to six decimals).
//! A call's cost is `Σ tokens × price` in those units, divided by 10⁶ once, rounded half up: one
//! rounding per call, so finance can recompute every record exactly.

use crate::config::PriceSpec;

/// Integer micro-USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prices {
    pub input: u64,
    pub output: u64,
    /// Cache reads; the input price when not configured.
    pub cached_input: u64,
    /// Cache writes (Anthropic `cache_creation_input_tokens`); the input price when not configured.
    pub cache_write: u64,
    /// Cache writes kept an hour; the `cache_write` price when not configured.
    pub cache_write_1h: u64,
}

/// Token counts of one call, as priced. `prompt` includes the cached and cache-written tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    pub prompt: u64,
    pub cached: u64,
    pub cache_write: u64,
    /// The part of `cache_write` kept an hour (priced at its own rate).
    pub cache_write_1h: u64,
    pub completion: u64,
}

/// USD (as configured) → integer micro-USD; `None` for values that are not exact to 6 decimals.
pub fn micros(usd: f64) -> Option<u64> {
    let m = (usd * 1e6).round();
    ((usd * 1e6 - m).abs() < 1e-6 && (0.0..9e15).contains(&m)).then_some(m as u64)
}

impl Prices {
    pub fn from_spec(p: &PriceSpec) -> Result<Self, String> {
        let conv = |name: &str, v: f64| micros(v).ok_or_else(|| format!("{name}: use at most 6 decimals of USD"));
        let input = conv("input", p.input)?;
        let cache_write = p.cache_write.map(|v| conv("cache_write", v)).transpose()?.unwrap_or(input);
        Ok(Self {
            input,
            output: conv("output", p.output)?,
            cached_input: p.cached_input.map(|v| conv("cached_input", v)).transpose()?.unwrap_or(input),
            cache_write,
            cache_write_1h: p.cache_write_1h.map(|v| conv("cache_write_1h", v)).transpose()?.unwrap_or(cache_write),
        })
    }

    /// The cost of one call in micro-USD; each part of the prompt is priced at its own rate.
    pub fn cost_micro_usd(&self, t: Tokens) -> u64 {
        let uncached = t.prompt.saturating_sub(t.cached).saturating_sub(t.cache_write);
        let hour = t.cache_write_1h.min(t.cache_write);
        let n = |t: u64, p: u64| u128::from(t) * u128::from(p);
        let total = n(uncached, self.input)
            + n(t.cached, self.cached_input)
            + n(t.cache_write - hour, self.cache_write)
            + n(hour, self.cache_write_1h)
            + n(t.completion, self.output);
        u64::try_from((total + 500_000) / 1_000_000).unwrap_or(u64::MAX)
    }

    /// Price of `prompt` input and `output` tokens, for the `cost` strategy (same units × 10⁶).
    pub fn estimate(&self, prompt: u64, output: u64) -> u128 {
        u128::from(prompt) * u128::from(self.input) + u128::from(output) * u128::from(self.output)
    }
}

/// `1234567` µUSD → `"1.234567"`. Written digit by digit: every answer's `x-ax-cost-usd` header
/// is one, and `format!` cost ~850 instructions a call.
pub fn format_usd(micro: u64) -> String {
    let mut s = String::with_capacity(28);
    s.push_str(itoa::Buffer::new().format(micro / 1_000_000));
    s.push('.');
    let mut fraction = [b'0'; 6];
    let mut rest = micro % 1_000_000;
    for digit in fraction.iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    s.extend(fraction.map(char::from));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sonnet() -> Prices {
        // $3 input, $15 output, $0.30 cache reads, $3.75 cache writes per Mtok.
        Prices::from_spec(&PriceSpec {
            input: 3.0,
            output: 15.0,
            cached_input: Some(0.3),
            cache_write: Some(3.75),
            cache_write_1h: Some(6.0),
        })
        .unwrap()
    }

    #[test]
    fn anthropic_cache_reads_and_writes_priced_exactly() {
        // Anthropic usage: input_tokens 1,200 (uncached), cache_creation 2,000, cache_read 10,000,
        // output 850 → canonical prompt = 13,200.
        let t = Tokens { prompt: 13_200, completion: 850, cached: 10_000, cache_write: 2_000, cache_write_1h: 0 };
        // By hand: 1,200×3 + 10,000×0.3 + 2,000×3.75 + 850×15 = 3,600 + 3,000 + 7,500 + 12,750
        // = 26,850 USD per Mtok·token → 0.02685 USD = 26,850 µUSD.
        assert_eq!(sonnet().cost_micro_usd(t), 26_850);
        assert_eq!(format_usd(26_850), "0.026850");
        // 500 of the writes kept an hour, at $6: 1,500×3.75 + 500×6 = 5,625 + 3,000 = 8,625,
        // 1,125 more than at the five-minute price.
        let t = Tokens { cache_write_1h: 500, ..t };
        assert_eq!(sonnet().cost_micro_usd(t), 27_975);
    }

    #[test]
    fn usd_is_written_with_six_decimals() {
        for micro in [0, 1, 9, 10, 999_999, 1_000_000, 1_000_001, 26_850, 123_456_789, u64::MAX] {
            assert_eq!(format_usd(micro), format!("{}.{:06}", micro / 1_000_000, micro % 1_000_000), "{micro}");
        }
    }

    #[test]
    fn rounding_is_once_and_half_up() {
        let p = Prices::from_spec(&PriceSpec {
            input: 0.15,
            output: 0.6,
            cached_input: None,
            cache_write: None,
            cache_write_1h: None,
        })
        .unwrap();
        assert_eq!(p.cached_input, 150_000, "cache reads default to the input price");
        // 7 × 0.15 + 3 × 0.6 = 2.85 µUSD → 3.
        assert_eq!(p.cost_micro_usd(Tokens { prompt: 7, completion: 3, ..Tokens::default() }), 3);
        // 1 × 0.15 = 0.15 µUSD → 0.
        assert_eq!(p.cost_micro_usd(Tokens { prompt: 1, ..Tokens::default() }), 0);
        assert_eq!(p.cost_micro_usd(Tokens { prompt: 1_000, completion: 500, ..Tokens::default() }), 450);
    }

    #[test]
    fn prices_beyond_micro_usd_are_refused() {
        assert!(Prices::from_spec(&PriceSpec {
            input: 0.0000001,
            output: 1.0,
            cached_input: None,
            cache_write: None,
            cache_write_1h: None
        })
        .is_err());
    }
}
