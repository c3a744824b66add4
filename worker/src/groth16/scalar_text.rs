//! Field elements as text: the "0x…" big-endian hex that requests, results
//! and the job stores use, and decimal as snarkjs writes it.

use blstrs::Scalar;

/// "0x…" big-endian hex (or decimal) → a field element below the modulus.
/// Values at or above the modulus are refused in both notations.
pub fn parse_scalar(s: &str) -> Result<Scalar, String> {
    use ff::PrimeField;
    let s = s.trim();
    let value = if let Some(hex) = s.strip_prefix("0x") {
        if hex.is_empty() || hex.len() > 64 {
            return Err(format!("'{s}' is not 1 to 64 hex digits after 0x"));
        }
        let padded = format!("{hex:0>64}");
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(&padded, &mut bytes).map_err(|_| format!("'{s}' is not hexadecimal"))?;
        bytes.reverse();
        Option::from(Scalar::from_repr(bytes))
    } else {
        if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(format!("'{s}' is neither 0x-hex nor a decimal number"));
        }
        // from_str_vartime reduces modulo r: refuse r and above first, by
        // comparing digit strings of equal length.
        let digits = match s.trim_start_matches('0') {
            "" => "0",
            d => d,
        };
        let below_r =
            digits.len() < R_DECIMAL.len() || (digits.len() == R_DECIMAL.len() && digits < R_DECIMAL);
        Scalar::from_str_vartime(digits).filter(|_| below_r)
    };
    value.ok_or_else(|| format!("'{s}' is not below the BLS12-381 scalar field modulus"))
}

/// The scalar field's modulus r in decimal.
const R_DECIMAL: &str = "52435875175126190479447740508185965837690552500527637822603658699938581184513";

/// A field element as "0x…" big-endian hex.
pub fn format_scalar(x: &Scalar) -> String {
    use ff::PrimeField;
    let mut bytes = x.to_repr();
    bytes.as_mut().reverse();
    format!("0x{}", hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ff::Field;

    #[test]
    fn scalars_round_trip_through_hex_and_parse_decimal() {
        let x = Scalar::random(&mut rand::rngs::OsRng);
        assert_eq!(parse_scalar(&format_scalar(&x)).unwrap(), x);
        assert_eq!(parse_scalar("0x2a").unwrap(), Scalar::from(42));
        assert_eq!(parse_scalar("42").unwrap(), Scalar::from(42));
        assert_eq!(parse_scalar("0042").unwrap(), Scalar::from(42));
        assert_eq!(parse_scalar("0").unwrap(), Scalar::ZERO);
        let r_minus_1 = "52435875175126190479447740508185965837690552500527637822603658699938581184512";
        assert_eq!(parse_scalar(r_minus_1).unwrap(), -Scalar::ONE);
        let r = R_DECIMAL;
        for bad in [
            "",
            "0x",
            "0xzz",
            "-1",
            "1.5",
            r,
            &format!("0x{}", "f".repeat(64)),
            &format!("0x{}", "1".repeat(65)),
        ] {
            assert!(parse_scalar(bad).is_err(), "{bad}");
        }
    }
}
