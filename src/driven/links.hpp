// A consumer's buffer in a driven flow: its segment ring, then one link word per producer of the
// flow — the mover's per-link "moved-up-to" record that makes a restarted mover exactly-once
// (mover.hpp, Recovery) — then the doorbell's armed word (bell.hpp).
//
//   link word of producer p = (producer sequence s mod 2^32) << 32 | (consumer sequence q mod 2^32)
//
// The mover writes it before it publishes producer p's segment s as segment q of this consumer's
// ring (ordered before the state word: a release store, or a put before the publication's fence),
// and raises the producer ring's released tail to s after the publication. A restarted mover that
// finds a producer ring released up to s - 1 and a link word naming (s, q) with q published at the
// consumer knows that s was delivered and only its release is missing; one that finds (s, q) with q
// not yet published clears the word (0 names no transfer: sequences start at 1) before it moves
// anything, since q may then be published with another producer's segment. 32 bits of each sequence
// are enough: the words are compared only with sequences at most one apart.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dfi/memory/ring.hpp"

namespace dfi::driven::detail {

// Offset of producer p's link word in a consumer's region (the ring is at offset 0).
inline std::size_t link_offset(const memory::RingLayout& layout, std::size_t producer) {
  return layout.bytes() + 8 * producer;
}

// Offset of a consumer's doorbell armed word (bell.hpp): after the link words of `producers`
// producers (whole cache lines), on a line of its own.
inline std::size_t consumer_armed_offset(const memory::RingLayout& layout, std::size_t producers) {
  const std::size_t links = (8 * producers + memory::kWordLine - 1) / memory::kWordLine * memory::kWordLine;
  return layout.bytes() + links;
}

// Bytes of a consumer's region: the ring, the link words of `producers` producers and the armed
// word's line.
inline std::size_t consumer_region_bytes(const memory::RingLayout& layout, std::size_t producers) {
  return consumer_armed_offset(layout, producers) + memory::kWordLine;
}

inline std::uint64_t link_word(std::uint64_t producer_sequence, std::uint64_t consumer_sequence) {
  return (producer_sequence << 32) | (consumer_sequence & 0xffffffffu);
}

// True when `word` records producer sequence `producer_sequence` moved as consumer sequence
// `consumer_sequence`.
inline bool link_names(std::uint64_t word, std::uint64_t producer_sequence, std::uint64_t consumer_sequence) {
  return word == link_word(producer_sequence, consumer_sequence);
}

}  // namespace dfi::driven::detail
