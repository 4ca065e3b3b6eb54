//! Numbers for humans: thousands separators, money, percentages, relative times.

/// `1234567` → `1,234,567`.
pub fn int(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

/// Micro-USD → `$1,234.56` (cents; amounts under a cent keep their digits: `$0.0042`).
pub fn usd_micro(micro: i64) -> String {
    let sign = if micro < 0 { "-" } else { "" };
    let m = micro.unsigned_abs();
    if m > 0 && m < 10_000 {
        let s = format!("{:.6}", m as f64 / 1e6);
        return format!("{sign}${}", s.trim_end_matches('0'));
    }
    let cents = (m + 5_000) / 10_000;
    format!("{sign}${}.{:02}", int(i64::try_from(cents / 100).unwrap_or(i64::MAX)), cents % 100)
}

/// Micro-USD → the exact amount, to the micro-dollar: `$1,234.125904`.
pub fn usd_exact(micro: i64) -> String {
    let sign = if micro < 0 { "-" } else { "" };
    let m = micro.unsigned_abs();
    format!("{sign}${}.{:06}", int(i64::try_from(m / 1_000_000).unwrap_or(i64::MAX)), m % 1_000_000)
}

/// `12.5` → `12.5 %`.
pub fn pct(p: f64) -> String {
    if (p - p.round()).abs() < 0.05 {
        format!("{p:.0} %")
    } else {
        format!("{p:.1} %")
    }
}

/// A byte count: `0 B`, `812 B`, `48.3 KB`, `1.2 MB` (powers of 1,000).
pub fn bytes(n: u64) -> String {
    match n {
        0..1_000 => format!("{n} B"),
        1_000..1_000_000 => format!("{:.1} KB", n as f64 / 1e3),
        _ => format!("{:.1} MB", n as f64 / 1e6),
    }
}

/// Milliseconds, "–" when unknown: `0.4 ms`, `12 ms`.
pub fn ms(x: Option<f64>) -> String {
    match x {
        None => "–".to_owned(),
        Some(x) if x < 10.0 => format!("{x:.1} ms"),
        Some(x) => format!("{x:.0} ms"),
    }
}

/// An RFC 3339 UTC time → "12 s ago", "5 min ago", "3 h ago", or the date.
pub fn ago(rfc3339: &str, now_ms: f64) -> String {
    let t = js_sys_parse(rfc3339);
    if t.is_nan() {
        return rfc3339.to_owned();
    }
    let s = ((now_ms - t) / 1000.0).max(0.0);
    if s < 60.0 {
        format!("{s:.0} s ago")
    } else if s < 3600.0 {
        format!("{:.0} min ago", s / 60.0)
    } else if s < 86_400.0 {
        format!("{:.0} h ago", s / 3600.0)
    } else {
        rfc3339.get(..10).unwrap_or(rfc3339).to_owned()
    }
}

fn js_sys_parse(s: &str) -> f64 {
    js_sys::Date::parse(s)
}
