// The Prometheus text exposition format, version 0.0.4.
#include <kevlar/prometheus.hpp>

#include <charconv>
#include <cmath>
#include <system_error>

namespace kevlar::prometheus {
namespace {

bool allowed(char c, bool first) {
  const bool letter = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return letter || (!first && c >= '0' && c <= '9');
}

std::string sanitize(std::string_view in) {
  if (in.empty()) return std::string(1, '_');
  std::string out(in);
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (!allowed(out[i], i == 0)) out[i] = '_';
  }
  return out;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void append_number(std::string& out, std::uint64_t v);

void append_number(std::string& out, double v) {
  // Counts and other whole values print as integers (1000000, not 1e+06), up to 2^53.
  constexpr double exact = 9007199254740992.0;
  if (v >= 0 && v <= exact && v == std::floor(v)) {
    append_number(out, static_cast<std::uint64_t>(v));
    return;
  }
  if (std::isnan(v)) {
    out += "NaN";
  } else if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
  } else {
    char buf[32];
    // Shortest round-trip form, fixed notation for exponents from -4 up (0.0005, 2.5, 10).
    const auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general);
    out.append(buf, r.ptr);
  }
}

void append_number(std::string& out, std::uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, r.ptr);
}

void append_escaped(std::string& out, std::string_view text, bool quote) {
  for (const char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out.push_back(c);
    }
  }
}

/// `{k="v",...[,le="bound"]}` (nothing when there are no labels).
void append_labels(std::string& out, const Series& s, const std::string* le) {
  if (s.tags.empty() && le == nullptr) return;
  out.push_back('{');
  bool first = true;
  for (const SeriesTag& t : s.tags) {
    if (!first) out.push_back(',');
    first = false;
    out += label_name(t.key);
    out += "=\"";
    append_escaped(out, t.value, true);
    out.push_back('"');
  }
  if (le != nullptr) {
    if (!first) out.push_back(',');
    out += "le=\"";
    out += *le;
    out.push_back('"');
  }
  out.push_back('}');
}

/// One sample line: `<name><suffix>{labels[,le]} <value>`.
template <class Value>
void append_sample(std::string& out, const std::string& name, std::string_view suffix,
                   const Series& s, const std::string* le, Value value) {
  out += name;
  out += suffix;
  append_labels(out, s, le);
  out.push_back(' ');
  append_number(out, value);
  out.push_back('\n');
}

const char* type_name(InstrumentKind kind) {
  switch (kind) {
    case InstrumentKind::counter:
      return "counter";
    case InstrumentKind::histogram:
      return "histogram";
    case InstrumentKind::gauge:
      return "gauge";
  }
  return "untyped";
}

}  // namespace

std::string label_name(std::string_view key) { return sanitize(key); }

std::string metric_name(const Series& series) {
  std::string name = sanitize(series.name);
  if (series.unit == "s" && !ends_with(name, "_seconds")) name += "_seconds";
  if (series.kind == InstrumentKind::counter && !ends_with(name, "_total")) name += "_total";
  return name;
}

void write_text(const MetricsSnapshot& snapshot, std::string& out) {
  std::string family;
  for (const Series& s : snapshot.series) {
    const std::string name = metric_name(s);
    if (name != family) {  // a snapshot keeps the series of one instrument together
      family = name;
      out += "# HELP ";
      out += name;
      out.push_back(' ');
      append_escaped(out, s.description, false);
      out += "\n# TYPE ";
      out += name;
      out.push_back(' ');
      out += type_name(s.kind);
      out.push_back('\n');
    }
    if (s.kind != InstrumentKind::histogram) {
      append_sample(out, name, "", s, nullptr, s.value);
      continue;
    }
    std::string le;
    for (std::size_t b = 0; b < s.buckets.size(); ++b) {
      le.clear();
      if (b < s.bounds.size()) {
        append_number(le, s.bounds[b]);
      } else {
        le = "+Inf";
      }
      append_sample(out, name, "_bucket", s, &le, s.buckets[b]);
    }
    append_sample(out, name, "_sum", s, nullptr, s.value);
    append_sample(out, name, "_count", s, nullptr, s.count);
  }
}

std::string to_text(const MetricsSnapshot& snapshot) {
  std::string out;
  write_text(snapshot, out);
  return out;
}

}  // namespace kevlar::prometheus
