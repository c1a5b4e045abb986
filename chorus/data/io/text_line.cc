#include <chorus/data/io/text_line.h>

#include <cstring>

#include <chorus/core/error.h>
#include <chorus/data/internal.h>
#include <chorus/data/io/text_line_internal.h>

namespace chorus::data {

using chorus::internal::str_cat;

namespace internal {

void LineReader::append(std::string* line, std::string_view piece, std::uint64_t start) {
  // Checked before the bytes are kept: a line never holds more than max_ bytes.
  if (piece.size() > max_ - line->size())
    throw ResourceExhaustedError(str_cat("the line at byte offset ", start, " in ", in_.name(),
                                         " is longer than max_line_bytes = ", describe_bytes(max_), " (",
                                         line->size() + piece.size(),
                                         " bytes read so far); if its lines really are this long, raise the option"));
  line->append(piece);
}

bool LineReader::next(std::string* line) {
  line->clear();
  const std::uint64_t start = in_.offset();
  for (;;) {
    std::string_view w = in_.window();
    if (w.empty()) return !line->empty();  // the last line, unless only '\r's were left of it
    const void* nl = std::memchr(w.data(), '\n', w.size());
    const std::size_t take = nl ? static_cast<std::size_t>(static_cast<const char*>(nl) - w.data()) : w.size();
    std::string_view piece = w.substr(0, take);
    // Every '\r' is dropped, as TF's ReadLine does.
    for (std::size_t cr; (cr = piece.find('\r')) != std::string_view::npos; piece.remove_prefix(cr + 1))
      append(line, piece.substr(0, cr), start);
    append(line, piece, start);
    in_.consume(take + (nl ? 1 : 0));
    if (nl) return true;
  }
}

std::vector<std::string> split_lines(std::string_view bytes, std::uint64_t max_line_bytes, std::size_t buffer_size) {
  BufferedInput in(std::make_unique<StringSource>(std::string(bytes)), buffer_size);
  LineReader reader(in, max_line_bytes);
  std::vector<std::string> out;
  for (std::string line; reader.next(&line);) out.push_back(line);
  return out;
}

}  // namespace internal

}  // namespace chorus::data
