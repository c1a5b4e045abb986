// Internal to checkpoint/: the LevelDB-style sorted table ("SSTable") that a bundle's `.index`
// file is (docs/formats.md B2; TF's tensorflow/core/lib/io/{table_builder,block_builder,table,format}.cc).
//
//   [data block]* [metaindex block (empty)] [index block] [footer, 48 bytes]
//
// Each block: entries `varint32 shared, varint32 non_shared, varint32 value_len, key delta, value`
// with a restart point (shared = 0) every 16 entries (every entry in the index block), then the
// restart offsets and their count as fixed32, then a 5-byte trailer: type 0 (uncompressed) and the
// masked CRC32C of block ‖ type. Index entries: a separator key ≥ every key of the block and < the
// next block's first key (FindShortSuccessor of the last key after the last block) → BlockHandle
// {varint64 offset, varint64 size without trailer}. The bytes we write are TF's byte for byte.
//
// Thread-safety: a TableBuilder is used by one thread; read_table is a pure function.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::train::internal {

// Builds a whole table in memory (an index is small next to the data it describes).
class TableBuilder {
 public:
  // Adds key → value. Keys must be strictly increasing bytewise (InternalError otherwise: the
  // caller sorts).
  void add(std::string_view key, std::string_view value);
  // Writes the remaining data block, the metaindex, the index and the footer; returns the file's
  // bytes. Call once; the builder is spent afterwards.
  std::string finish();

  std::size_t num_entries() const { return num_entries_; }

 private:
  class Block {
   public:
    explicit Block(int restart_interval) : restart_interval_(restart_interval) {}
    void add(std::string_view key, std::string_view value);
    // LevelDB's CurrentSizeEstimate: entries + restart array + its count.
    std::size_t size_estimate() const { return buf_.size() + restarts_.size() * 4 + 4; }
    bool empty() const { return buf_.empty(); }
    // The finished block's bytes; resets the builder.
    std::string finish();

   private:
    int restart_interval_;
    std::string buf_;
    std::vector<std::uint32_t> restarts_{0};  // the first restart is always offset 0
    int counter_ = 0;
    std::string last_key_;
  };

  // Appends `block` and its trailer to out_; returns the handle encoded.
  std::string write_block(Block& block);

  std::string out_;
  Block data_block_{16};
  Block index_block_{1};
  std::string last_key_;
  bool pending_index_entry_ = false;
  std::string pending_handle_;
  std::size_t num_entries_ = 0;
  bool finished_ = false;
};

// LevelDB's BytewiseComparator helpers, exposed for tests.
// Shortens `start` to a key in [start, limit) when possible (limit > start required).
void find_shortest_separator(std::string& start, std::string_view limit);
// Shortens `key` to a key ≥ key: the first byte that is not 0xff incremented, the rest dropped.
void find_short_successor(std::string& key);

// Walks every entry of the table held in `contents` in key order, calling visit(key, value) (the
// views point into `contents` or a scratch key buffer valid for the call only). Checks the footer
// magic, every BlockHandle's bounds, every block's CRC and layout, that keys strictly increase and
// agree with the index block's separators. Any violation → DataLossError naming `filename`; a
// Snappy-compressed block → UnimplementedError. Never reads outside `contents`.
void read_table(std::string_view contents, const std::string& filename,
                const std::function<void(std::string_view key, std::string_view value)>& visit);

}  // namespace chorus::train::internal
