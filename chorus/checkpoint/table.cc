#include <chorus/checkpoint/table.h>

#include <algorithm>
#include <cstring>

#include <chorus/checkpoint/bundle_format.h>
#include <chorus/core/crc32c.h>
#include <chorus/core/error.h>
#include <chorus/core/proto_wire.h>

namespace chorus::train::internal {

using chorus::internal::str_cat;
using wire::append_fixed32;
using wire::append_varint;

// ---------------------------------------------------------------------------------------------
// Writing

void find_shortest_separator(std::string& start, std::string_view limit) {
  const std::size_t min_len = std::min(start.size(), limit.size());
  std::size_t diff = 0;
  while (diff < min_len && start[diff] == limit[diff]) ++diff;
  if (diff >= min_len) return;  // one is a prefix of the other: no shortening
  const auto byte = static_cast<std::uint8_t>(start[diff]);
  if (byte < 0xff && byte + 1 < static_cast<std::uint8_t>(limit[diff])) {
    start[diff] = static_cast<char>(byte + 1);
    start.resize(diff + 1);
  }
}

void find_short_successor(std::string& key) {
  for (std::size_t i = 0; i < key.size(); ++i) {
    const auto byte = static_cast<std::uint8_t>(key[i]);
    if (byte != 0xff) {
      key[i] = static_cast<char>(byte + 1);
      key.resize(i + 1);
      return;
    }
  }
  // All 0xff (or empty): left as is.
}

void TableBuilder::Block::add(std::string_view key, std::string_view value) {
  std::size_t shared = 0;
  if (counter_ < restart_interval_) {
    const std::size_t n = std::min(last_key_.size(), key.size());
    while (shared < n && last_key_[shared] == key[shared]) ++shared;
  } else {
    restarts_.push_back(static_cast<std::uint32_t>(buf_.size()));
    counter_ = 0;
  }
  append_varint(buf_, shared);
  append_varint(buf_, key.size() - shared);
  append_varint(buf_, value.size());
  buf_.append(key.substr(shared));
  buf_.append(value);
  last_key_.assign(key);
  ++counter_;
}

std::string TableBuilder::Block::finish() {
  for (std::uint32_t r : restarts_) append_fixed32(buf_, r);
  append_fixed32(buf_, static_cast<std::uint32_t>(restarts_.size()));
  std::string out = std::move(buf_);
  buf_.clear();
  restarts_.assign(1, 0);
  counter_ = 0;
  last_key_.clear();
  return out;
}

std::string TableBuilder::write_block(Block& block) {
  const std::string contents = block.finish();
  std::string handle;
  append_varint(handle, out_.size());
  append_varint(handle, contents.size());
  out_.append(contents);
  const char type = static_cast<char>(kNoCompression);
  out_.push_back(type);
  const std::uint32_t crc = crc32c(&type, 1, crc32c(contents.data(), contents.size()));
  append_fixed32(out_, mask_crc32c(crc));
  return handle;
}

void TableBuilder::add(std::string_view key, std::string_view value) {
  CHORUS_ENFORCE(!finished_, "TableBuilder::add after finish");
  if (num_entries_ > 0)
    CHORUS_ENFORCE(key > std::string_view(last_key_), "table keys must be strictly increasing: '", key, "' after '",
                   last_key_, "'");
  if (pending_index_entry_) {
    find_shortest_separator(last_key_, key);
    index_block_.add(last_key_, pending_handle_);
    pending_index_entry_ = false;
  }
  last_key_.assign(key);
  ++num_entries_;
  data_block_.add(key, value);
  if (data_block_.size_estimate() >= kBlockSize) {
    pending_handle_ = write_block(data_block_);
    pending_index_entry_ = true;
  }
}

std::string TableBuilder::finish() {
  CHORUS_ENFORCE(!finished_, "TableBuilder::finish called twice");
  finished_ = true;
  if (!data_block_.empty()) {
    pending_handle_ = write_block(data_block_);
    pending_index_entry_ = true;
  }
  Block metaindex(kBlockRestartInterval);
  const std::string metaindex_handle = write_block(metaindex);
  if (pending_index_entry_) {
    find_short_successor(last_key_);
    index_block_.add(last_key_, pending_handle_);
    pending_index_entry_ = false;
  }
  const std::string index_handle = write_block(index_block_);
  std::string footer = metaindex_handle + index_handle;
  footer.resize(2 * kMaxBlockHandleSize, '\0');
  append_fixed32(footer, static_cast<std::uint32_t>(kTableMagic & 0xffffffffu));
  append_fixed32(footer, static_cast<std::uint32_t>(kTableMagic >> 32));
  out_.append(footer);
  return std::move(out_);
}

// ---------------------------------------------------------------------------------------------
// Reading

namespace {

struct Handle {
  std::uint64_t offset = 0;
  std::uint64_t size = 0;
};

class TableParser {
 public:
  TableParser(std::string_view contents, const std::string& filename) : file_(contents), filename_(filename) {}

  [[noreturn]] void fail(const std::string& why) const {
    throw DataLossError(str_cat("corrupt checkpoint index '", filename_, "' (", file_.size(), " bytes): ", why));
  }

  // Varint of at most `max_bytes` bytes from s[pos...]; advances pos.
  std::uint64_t varint(std::string_view s, std::size_t& pos, int max_bytes, const char* what) const {
    std::uint64_t value = 0;
    for (int i = 0; i < max_bytes; ++i) {
      if (pos >= s.size()) fail(str_cat("truncated varint (", what, ")"));
      const auto byte = static_cast<std::uint8_t>(s[pos++]);
      value |= static_cast<std::uint64_t>(byte & 0x7f) << (7 * i);
      if ((byte & 0x80) == 0) {
        if (max_bytes == 5 && value > 0xffffffffu) fail(str_cat("varint32 out of range (", what, ")"));
        return value;
      }
    }
    fail(str_cat("overlong varint (", what, ")"));
  }

  Handle handle(std::string_view s, std::size_t& pos, const char* what) const {
    Handle h;
    h.offset = varint(s, pos, 10, what);
    h.size = varint(s, pos, 10, what);
    return h;
  }

  // The block's contents (without trailer), CRC and type checked.
  std::string_view block(const Handle& h, const char* what) const {
    const std::uint64_t limit = file_.size() - kFooterSize;  // blocks lie before the footer
    if (h.offset > limit || h.size > limit - h.offset || kBlockTrailerSize > limit - h.offset - h.size)
      fail(str_cat(what, " block handle {offset ", h.offset, ", size ", h.size, "} runs past the end of the blocks (",
                   limit, " bytes)"));
    const std::string_view contents = file_.substr(h.offset, h.size);
    const char* trailer = file_.data() + h.offset + h.size;
    std::uint32_t stored;
    std::memcpy(&stored, trailer + 1, 4);
    const std::uint32_t actual = crc32c(trailer, 1, crc32c(contents.data(), contents.size()));
    if (unmask_crc32c(stored) != actual)
      fail(str_cat(what, " block at offset ", h.offset, ": block checksum mismatch (stored ", std::hex, stored,
                   ", computed ", mask_crc32c(actual), std::dec, ")"));
    const auto type = static_cast<std::uint8_t>(trailer[0]);
    if (type == kSnappyCompression)
      throw UnimplementedError(str_cat("checkpoint index '", filename_, "': ", what, " block at offset ", h.offset,
                                       " is Snappy-compressed; chorus reads uncompressed tables only (as TF's "
                                       "BundleWriter writes them)"));
    if (type != kNoCompression) fail(str_cat(what, " block at offset ", h.offset, ": unknown block type ", int{type}));
    return contents;
  }

  // Walks one block's entries; visit(key, value). Keys must increase within the block.
  template <typename Visit>
  void entries(std::string_view b, const char* what, Visit&& visit) {
    if (b.size() < 4) fail(str_cat(what, " block of ", b.size(), " bytes is too short for its restart count"));
    std::uint32_t num_restarts;
    std::memcpy(&num_restarts, b.data() + b.size() - 4, 4);
    if (num_restarts > (b.size() - 4) / 4)
      fail(str_cat(what, " block: ", num_restarts, " restart points do not fit in ", b.size(), " bytes"));
    const std::size_t restarts_at = b.size() - 4 - 4 * static_cast<std::size_t>(num_restarts);
    for (std::uint32_t i = 0; i < num_restarts; ++i) {
      std::uint32_t r;
      std::memcpy(&r, b.data() + restarts_at + 4 * i, 4);
      if (r > restarts_at)
        fail(str_cat(what, " block: restart offset ", r, " past the entries (", restarts_at, " bytes)"));
    }
    const std::string_view data = b.substr(0, restarts_at);
    std::size_t pos = 0;
    key_.clear();
    bool first = true;
    while (pos < data.size()) {
      const std::uint64_t shared = varint(data, pos, 5, "entry key prefix length");
      const std::uint64_t non_shared = varint(data, pos, 5, "entry key suffix length");
      const std::uint64_t value_len = varint(data, pos, 5, "entry value length");
      if (shared > key_.size())
        fail(str_cat(what, " block: entry shares ", shared, " key bytes with a previous key of ", key_.size()));
      if (non_shared > data.size() - pos || value_len > data.size() - pos - non_shared)
        fail(str_cat(what, " block: entry of ", non_shared, " key and ", value_len,
                     " value bytes runs past the block (", data.size() - pos, " bytes left)"));
      prev_.assign(key_);
      key_.resize(shared);
      key_.append(data.substr(pos, non_shared));
      pos += non_shared;
      const std::string_view value = data.substr(pos, value_len);
      pos += value_len;
      if (!first && !(std::string_view(key_) > std::string_view(prev_)))
        fail(str_cat(what, " block: keys out of order ('", prev_, "' then '", key_, "')"));
      first = false;
      visit(std::string_view(key_), value);
    }
  }

  std::string_view file_;
  const std::string& filename_;
  std::string key_, prev_;
};

}  // namespace

void read_table(std::string_view contents, const std::string& filename,
                const std::function<void(std::string_view key, std::string_view value)>& visit) {
  TableParser p(contents, filename);
  if (contents.size() < kFooterSize)
    p.fail(str_cat("file is too short to be an sstable (", contents.size(), " bytes, the footer alone is ", kFooterSize,
                   ")"));
  const std::string_view footer = contents.substr(contents.size() - kFooterSize);
  std::uint32_t lo, hi;
  std::memcpy(&lo, footer.data() + 40, 4);
  std::memcpy(&hi, footer.data() + 44, 4);
  const std::uint64_t magic = (static_cast<std::uint64_t>(hi) << 32) | lo;
  if (magic != kTableMagic)
    p.fail(str_cat("not an sstable (bad magic number 0x", std::hex, magic, ", expected 0x", kTableMagic, ")"));
  std::size_t pos = 0;
  const std::string_view handles = footer.substr(0, 2 * kMaxBlockHandleSize);
  const Handle metaindex = p.handle(handles, pos, "metaindex handle");
  const Handle index = p.handle(handles, pos, "index handle");
  p.block(metaindex, "metaindex");  // checked, not used (as TF's Table::Open)
  const std::string_view index_block = p.block(index, "index");

  // Collect the index entries first (the parser's key buffer is reused for data blocks).
  struct IndexEntry {
    std::string separator;
    Handle handle;
  };
  std::vector<IndexEntry> blocks;
  p.entries(index_block, "index", [&](std::string_view key, std::string_view value) {
    std::size_t vpos = 0;
    const Handle h = p.handle(value, vpos, "index entry block handle");
    blocks.push_back({std::string(key), h});
  });

  std::string last_key;
  bool any = false;
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const std::string_view b = p.block(blocks[i].handle, "data");
    std::string_view sep = blocks[i].separator;
    bool block_empty = true;
    p.entries(b, "data", [&](std::string_view key, std::string_view value) {
      if (any && !(key > std::string_view(last_key)))
        p.fail(str_cat("data block ", i, ": key '", key, "' does not follow the previous block's last key '", last_key,
                       "'"));
      if (block_empty && i > 0 && !(key > std::string_view(blocks[i - 1].separator)))
        p.fail(str_cat("data block ", i, ": first key '", key, "' is not above the index separator '",
                       blocks[i - 1].separator, "'"));
      if (key > sep) p.fail(str_cat("data block ", i, ": key '", key, "' is above its index separator '", sep, "'"));
      block_empty = false;
      any = true;
      last_key.assign(key);
      visit(key, value);
    });
  }
}

}  // namespace chorus::train::internal
