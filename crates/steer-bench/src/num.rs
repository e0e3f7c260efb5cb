//! Numbers as every report prints and stores them: fixed decimals or `-`
//! for a missing value (`fixed`, `f0`, `f1`, `f2`), ratios,
//! medians, jq-style rounding (`r(d)`) and jq-style JSON numbers (integral
//! values stored as integers), and reading a number out of a JSON document
//! by pointer.
//!
//! Invariant: a missing or non-finite value is never printed as a number:
//! it is `-` in tables and `null` in JSON.

use serde_json::Value;

/// `v` as JSON the way jq writes a number: an integral value as an integer
/// (`2.0` -> `2`), anything else as a float, non-finite as `null`.
///
/// ```
/// use steer_bench::num::jnum;
/// assert_eq!(jnum(2.0).to_string(), "2");
/// assert_eq!(jnum(2.5).to_string(), "2.5");
/// assert!(jnum(f64::NAN).is_null());
/// ```
pub fn jnum(v: f64) -> Value {
    if !v.is_finite() {
        Value::Null
    } else if v.fract() == 0.0 && v.abs() < 9.0e15 {
        Value::from(v as i64)
    } else {
        Value::from(v)
    }
}

/// [`jnum`] of an optional value (`None` is `null`).
pub fn jopt(v: Option<f64>) -> Value {
    v.map_or(Value::Null, jnum)
}

/// `v` with `d` decimals, `-` when missing.
pub fn fixed(v: Option<f64>, d: usize) -> String {
    match v {
        Some(v) if v.is_finite() => format!("{v:.d$}"),
        _ => "-".into(),
    }
}

/// `v` with no decimals, `-` when missing.
pub fn f0(v: Option<f64>) -> String {
    fixed(v, 0)
}

/// `v` with one decimal, `-` when missing.
pub fn f1(v: Option<f64>) -> String {
    fixed(v, 1)
}

/// `v` with two decimals, `-` when missing.
pub fn f2(v: Option<f64>) -> String {
    fixed(v, 2)
}

/// `a / b` with `d` decimals, `-` when either is missing or `b` is 0.
pub fn div(a: Option<f64>, b: Option<f64>, d: usize) -> String {
    fixed(ratio(a, b), d)
}

/// `a / b` of two costs or rates, `None` when either is missing or `b` is
/// not positive (a cost minus a floor can come out at or below zero: no
/// ratio then).
pub fn ratio_pos(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    ratio(a, b.filter(|&b| b > 0.0))
}

/// `a / b`, `None` when either is missing or `b` is 0.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b != 0.0 => Some(a / b),
        _ => None,
    }
}

/// A number as `jq -r` prints it: integers without a fraction, others in
/// their shortest form.
pub fn shortest(v: f64) -> String {
    match jnum(v) {
        Value::Null => "null".into(),
        n => n.to_string(),
    }
}

/// jq's `r(d)`: rounded to `d` decimals (half away from zero), printed in
/// the shortest form (`2.50` -> `2.5`, `1.00` -> `1`); `-` when missing.
pub fn round_to(v: Option<f64>, d: i32) -> String {
    match v {
        Some(v) if v.is_finite() => {
            let p = 10f64.powi(d);
            shortest((v * p).round() / p)
        }
        _ => "-".into(),
    }
}

/// A JSON value as `jq -r '.x // empty'` prints it: strings bare, numbers
/// as [`shortest`], `null`/`false`/absent as nothing.
pub fn raw(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) | Some(Value::Bool(false)) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.as_f64().map_or_else(|| n.to_string(), shortest),
        Some(v) => v.to_string(),
    }
}

/// The number at JSON pointer `ptr` (`/window/rx_per_s`) of `v`.
pub fn num(v: &Value, ptr: &str) -> Option<f64> {
    v.pointer(ptr).and_then(Value::as_f64)
}

/// The median of the values present (the mean of the middle two for an
/// even count), as the medians tables take it; `None` when none is.
///
/// ```
/// use steer_bench::num::median;
/// assert_eq!(median([Some(3.0), None, Some(1.0), Some(2.0)]), Some(2.0));
/// assert_eq!(median([Some(1.0), Some(2.0)]), Some(1.5));
/// assert_eq!(median([None]), None);
/// ```
pub fn median(values: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = values.into_iter().flatten().collect();
    median_of(&v)
}

/// The median of `v` (the mean of the middle two for an even count),
/// `None` when empty.
pub fn median_of(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let n = s.len();
    Some(if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    })
}

/// Percent fewer: `100 * (1 - new / old)` rounded to one decimal
/// (`None` when `old` is 0 or either is missing).
pub fn fewer_pct(new: Option<f64>, old: Option<f64>) -> Option<String> {
    let r = ratio(new, old)?;
    Some(format!("{:.1}", 100.0 * (1.0 - r)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fixed_decimals_rounding_and_percentages() {
        assert_eq!(fixed(Some(2608.56), 1), "2608.6");
        assert_eq!(fixed(None, 2), "-");
        assert_eq!(fixed(Some(f64::INFINITY), 2), "-");
        assert_eq!(div(Some(3.0), Some(2.0), 2), "1.50");
        assert_eq!(div(Some(3.0), Some(0.0), 2), "-");
        assert_eq!(round_to(Some(97.649), 1), "97.6");
        assert_eq!(round_to(Some(99.96), 1), "100");
        assert_eq!(round_to(Some(2.5), 0), "3");
        assert_eq!(round_to(Some(-2.5), 0), "-3");
        assert_eq!(round_to(None, 1), "-");
        assert_eq!(shortest(1e3 / 30.28), "33.02509907529723");
        assert_eq!(fewer_pct(Some(0.0), Some(5.0)).as_deref(), Some("100.0"));
        assert_eq!(fewer_pct(Some(6.0), Some(5.0)).as_deref(), Some("-20.0"));
        assert_eq!(fewer_pct(Some(1.0), Some(0.0)), None);
    }

    #[test]
    fn fixed_decimals_and_ratios() {
        assert_eq!(f0(Some(2.5)), "2");
        assert_eq!(f0(Some(3.5)), "4");
        assert_eq!(f1(Some(0.25)), "0.2");
        assert_eq!(f2(Some(1.0 / 3.0)), "0.33");
        assert_eq!(f2(None), "-");
        assert_eq!(f1(Some(f64::NAN)), "-");
        assert_eq!(ratio(Some(1.0), Some(-2.0)), Some(-0.5));
        assert_eq!(ratio_pos(Some(1.0), Some(-2.0)), None);
        assert_eq!(ratio_pos(Some(1.0), Some(0.0)), None);
        assert_eq!(ratio_pos(Some(3.0), Some(2.0)), Some(1.5));
        assert_eq!(ratio_pos(None, Some(2.0)), None);
    }

    #[test]
    fn medians_odd_even_empty_and_unsorted() {
        assert_eq!(median_of(&[]), None);
        assert_eq!(median_of(&[5.0]), Some(5.0));
        assert_eq!(median_of(&[9.0, 1.0, 5.0]), Some(5.0));
        assert_eq!(median_of(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median_of(&[f64::INFINITY, 1.0, 2.0]), Some(2.0));
        assert_eq!(median([None, None]), None);
    }

    #[test]
    fn raw_and_pointers() {
        let v = json!({"a": {"b": 2.0, "c": "x", "d": null, "e": 12}});
        assert_eq!(raw(v.pointer("/a/b")), "2");
        assert_eq!(raw(v.pointer("/a/c")), "x");
        assert_eq!(raw(v.pointer("/a/d")), "");
        assert_eq!(raw(v.pointer("/a/zz")), "");
        assert_eq!(raw(v.pointer("/a/e")), "12");
        assert_eq!(num(&v, "/a/e"), Some(12.0));
        assert_eq!(num(&v, "/a/c"), None);
        assert_eq!(jopt(None), Value::Null);
        assert!(jnum(1e17).is_f64(), "too large to be sure it is an integer");
    }
}
