"""The /generate JSON contract gate of SGLang 0.5.23, for the fields the simulator reads.

0.5.23 checks every /generate body against its generated schema before serving it
(sglang/srt/entrypoints/http_server.py generate_request -> entrypoints/api_contract.py
generate_contract_error -> sglang/api/v1/api_types.py decode_GenerateRequest). A violation is
answered 400 with {"error": "<text>"}, the text being serde's wording as api_types.py spells
it (_unexpected, _invalid_type, _unknown_field). Unknown keys of the request itself are
ignored; unknown keys of sampling_params are refused ("unknown field `x`, expected one of ...").

Only the request fields the simulator acts on are type-checked here (GENERATE_FIELDS); the
other fields of 0.5.23's GenerateRequest pass unchecked, as unknown ones do.
tests/contract/test_api_contract.py runs this module and the wheel's own decoders on the same
bodies and fails when a text, a field or a default drifts.
"""

# api_types.py _FIELDS_SamplingParams, in the release's order (its error text lists them so).
SAMPLING_PARAMS_FIELDS = (
    "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k",
    "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens",
    "n", "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens",
    "spaces_between_special_tokens", "no_stop_trim", "stream_interval", "logit_bias",
    "sampling_seed", "custom_params", "beam_width", "watermark", "choice",
)

# api_types.py class SamplingParams defaults (the value a null or a missing key stands for).
SAMPLING_PARAMS_DEFAULTS = {
    "max_new_tokens": 128, "temperature": 1.0, "top_p": 1.0, "top_k": 1073741824, "min_p": 0.0,
    "frequency_penalty": 0.0, "presence_penalty": 0.0, "repetition_penalty": 1.0,
    "min_new_tokens": 0, "n": 1, "ignore_eos": False,
}

_WATERMARK_FIELDS = ("enabled", "key", "context_window")


class ContractError(ValueError):
    """A /generate body the 0.5.23 schema refuses (HTTP 400, {"error": str(exc)})."""


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _unexpected(v):
    """serde's `Unexpected` display (api_types.py _unexpected)."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean `%s`" % ("true" if v else "false")
    if isinstance(v, int):
        return "integer `%d`" % v
    if isinstance(v, float):
        return "floating point `%r`" % v
    if isinstance(v, str):
        return 'string "%s"' % v
    if isinstance(v, list):
        return "sequence"
    if isinstance(v, dict):
        return "map"
    return type(v).__name__


def _invalid_type(v, expected):
    return ContractError("invalid type: %s, expected %s" % (_unexpected(v), expected))


def unknown_field(key, fields):
    """serde's unknown_field text (api_types.py _unknown_field)."""
    if not fields:
        return ContractError("unknown field `%s`, there are no fields" % key)
    if len(fields) == 1:
        return ContractError("unknown field `%s`, expected `%s`" % (key, fields[0]))
    if len(fields) == 2:
        return ContractError("unknown field `%s`, expected `%s` or `%s`" % (key, fields[0], fields[1]))
    return ContractError("unknown field `%s`, expected one of %s"
                         % (key, ", ".join("`%s`" % f for f in fields)))


def _int(v, expected="i64"):
    if not _is_int(v):
        raise _invalid_type(v, expected)
    return v


def _float(v, expected="f64"):
    if not _is_number(v):
        raise _invalid_type(v, expected)
    return float(v)


def _bool(v, expected="a boolean"):
    if not isinstance(v, bool):
        raise _invalid_type(v, expected)
    return v


def _str(v, expected="a string"):
    if not isinstance(v, str):
        raise _invalid_type(v, expected)
    return v


def _seq(v, expected="a sequence"):
    if not isinstance(v, list):
        raise _invalid_type(v, expected)
    return v


def _map(v, expected):
    if not isinstance(v, dict):
        raise _invalid_type(v, expected)
    return v


def _string_or_list(v):
    if isinstance(v, list):
        return [_str(e) for e in v]
    return _str(v, "a value or an array of values for StringOrList")


def _int_list(v):
    return [_int(e) for e in _seq(v)]


def _token_ids_or_list(v):
    if isinstance(v, list):
        # [] and [scalar, ...] are one flat list; anything else is a batch.
        if not v or _is_number(v[0]):
            return _int_list(v)
        return [_int_list(e) for e in _seq(v)]
    raise _invalid_type(v, "a value or an array of values for TokenIdsOrList")


def _bool_or_list(v):
    if isinstance(v, list):
        return [_bool(e) for e in v]
    return _bool(v, "a value or an array of values for BoolOrList")


def _int_or_list(v):
    if isinstance(v, list):
        return _int_list(v)
    return _int(v, "a value or an array of values for Int64OrList")


def _watermark(v):
    for key, x in _map(v, "struct WatermarkRequestConfig").items():
        if key not in _WATERMARK_FIELDS:
            raise unknown_field(key, _WATERMARK_FIELDS)
        if x is None:
            continue
        if key == "enabled":
            _bool(x)
        elif key == "key":
            _str(x)
        else:
            _int(x)
    return v


def _opt(check):
    return lambda x: None if x is None else check(x)


def _dflt(check, default):
    return lambda x: default if x is None else check(x)


_SP_CHECKS = {
    "max_new_tokens": _opt(_int),
    "stop": _opt(_string_or_list),
    "stop_token_ids": _opt(_int_list),
    "stop_regex": _opt(_string_or_list),
    "temperature": _dflt(_float, 1.0),
    "top_p": _dflt(_float, 1.0),
    "top_k": _dflt(_int, 1073741824),
    "min_p": _dflt(_float, 0.0),
    "frequency_penalty": _dflt(_float, 0.0),
    "presence_penalty": _dflt(_float, 0.0),
    "repetition_penalty": _dflt(_float, 1.0),
    "min_new_tokens": _dflt(_int, 0),
    "n": _dflt(_int, 1),
    "json_schema": _opt(_str),
    "regex": _opt(_str),
    "ebnf": _opt(_str),
    "structural_tag": _opt(_str),
    "ignore_eos": _dflt(_bool, False),
    "skip_special_tokens": _dflt(_bool, True),
    "spaces_between_special_tokens": _dflt(_bool, True),
    "no_stop_trim": _dflt(_bool, False),
    "stream_interval": _opt(_int),
    "logit_bias": lambda x: {} if x is None else {
        k: _float(e) for k, e in _map(x, "a map").items()},
    "sampling_seed": _opt(_int),
    "custom_params": lambda x: x,
    "beam_width": _opt(_int),
    "watermark": _opt(_watermark),
    "choice": lambda x: [] if x is None else [_str(e) for e in _seq(x)],
}


def decode_sampling_params(value):
    """api_types.py decode_SamplingParams: the params with defaults applied, or ContractError.
    An explicit null max_new_tokens stays None (no limit but the context), as in 0.5.23."""
    m = _map(value, "struct SamplingParams")
    out = dict(SAMPLING_PARAMS_DEFAULTS)
    for key, x in m.items():
        check = _SP_CHECKS.get(key)
        if check is None:
            raise unknown_field(key, SAMPLING_PARAMS_FIELDS)
        out[key] = check(x)
    return out


def _sampling_params_or_list(v):
    if isinstance(v, list):
        return [decode_sampling_params(e) for e in v]
    return decode_sampling_params(_map(v, "a value or an array of values for SamplingParamsOrList"))


# The GenerateRequest fields the simulator acts on, checked as decode_GenerateRequest does.
GENERATE_FIELDS = {
    "rid": _opt(_string_or_list),
    "text": _opt(_string_or_list),
    "input_ids": _opt(_token_ids_or_list),
    "stream": _dflt(_bool, False),
    "sampling_params": _opt(_sampling_params_or_list),
    "return_logprob": _opt(_bool_or_list),
    "logprob_start_len": _opt(_int_or_list),
    "top_logprobs_num": _opt(_int_or_list),
    "return_text_in_logprobs": _opt(_bool),
}


def generate_contract_error(body):
    """entrypoints/api_contract.py generate_contract_error: the violation text, or None."""
    try:
        m = _map(body, "struct GenerateRequest")
        for key, x in m.items():
            check = GENERATE_FIELDS.get(key)
            if check is not None:
                check(x)
    except ContractError as exc:
        return str(exc)
    return None
