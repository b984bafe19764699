// The checkout workload (workload.hpp): 001's TPC-W-like checkout on one table of products,
// stock records, and every client's insert ring of orders and order lines.
#include <algorithm>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "dfi/common/error.hpp"
#include "workloads.hpp"

namespace dfi::apps::rsi::detail {
namespace {

constexpr std::size_t kItems = 3;           // products per checkout
constexpr std::size_t kOrderHead = 8;       // order: number, client, 3 products, 3 quantities
constexpr std::size_t kLineHead = 3;        // line: order number, product, quantity
constexpr std::uint64_t kMaxQuantity = 5;   // units of one product per checkout: 1 .. 5

// Record ids of the one table.
struct Layout {
  std::uint64_t products = 0;
  std::uint64_t slots = 0;  // order slots per client
  std::size_t clients = 0;
  std::uint64_t product(std::uint64_t p) const noexcept { return p; }
  std::uint64_t stock(std::uint64_t p) const noexcept { return products + p; }
  std::uint64_t order(std::size_t client, std::uint64_t slot) const noexcept { return 2 * products + client * slots + slot; }
  std::uint64_t line(std::size_t client, std::uint64_t slot, std::size_t j) const noexcept {
    return 2 * products + clients * slots + (client * slots + slot) * kItems + j;
  }
  std::uint64_t records() const noexcept { return 2 * products + clients * slots * (1 + kItems); }
};

std::int64_t price(std::uint64_t p) { return static_cast<std::int64_t>(1 + p % 100); }

class CheckoutDriver final : public Driver {
 public:
  CheckoutDriver(const TxnOptions& o, const Layout& layout, std::size_t client)
      : o_(o), layout_(layout), client_(client), read_(2 * kItems * o.payload_bytes),
        write_((1 + kItems) * o.payload_bytes) {
    rng_ = 0xd1b54a32d192ed03ull * (client + 1);
  }

  Status run(Client& client) override {
    std::uint64_t products[kItems];
    std::int64_t quantities[kItems];
    for (std::size_t i = 0; i < kItems; ++i) {
      do {
        products[i] = next_random() % layout_.products;
      } while (std::find(products, products + i, products[i]) != products + i);
      quantities[i] = static_cast<std::int64_t>(1 + next_random() % kMaxQuantity);
    }
    Status s = client.begin();
    // Read the products and their stock (all in one round trip), then update the stock.
    std::uint64_t ids[2 * kItems];
    void* out[2 * kItems];
    for (std::size_t i = 0; i < kItems; ++i) {
      ids[2 * i] = layout_.product(products[i]);
      ids[2 * i + 1] = layout_.stock(products[i]);
      out[2 * i] = read_.data() + 2 * i * o_.payload_bytes;
      out[2 * i + 1] = read_.data() + (2 * i + 1) * o_.payload_bytes;
    }
    if (s) s = client.read_many(ids, out);
    for (std::size_t i = 0; i < kItems && s; ++i) {
      const std::span<std::byte> product(static_cast<std::byte*>(out[2 * i]), o_.payload_bytes);
      const std::span<std::byte> stock(static_cast<std::byte*>(out[2 * i + 1]), o_.payload_bytes);
      if (!uniform_words(product) || word_at(product, 0) != price(products[i])) return torn("product", products[i], client);
      if (!uniform_words(stock)) return torn("stock", products[i], client);
      fill_words(stock, word_at(stock, 0) + quantities[i]);
      s = client.write(layout_.stock(products[i]), stock.data());
    }
    // Insert the order and its lines into this client's next ring slot (their headers read in
    // one round trip).
    const std::int64_t number = static_cast<std::int64_t>(orders_ * layout_.clients + client_ + 1);
    const std::uint64_t slot = orders_ % layout_.slots;
    if (s) {
      std::uint64_t inserted[1 + kItems];
      const void* in[1 + kItems];
      std::int64_t head[kOrderHead] = {number, static_cast<std::int64_t>(client_)};
      for (std::size_t i = 0; i < kItems; ++i) {
        head[2 + i] = static_cast<std::int64_t>(products[i]);
        head[2 + kItems + i] = quantities[i];
      }
      const std::span<std::byte> order(write_.data(), o_.payload_bytes);
      std::memcpy(order.data(), head, sizeof head);
      fill_words(order, number, kOrderHead);
      inserted[0] = layout_.order(client_, slot);
      in[0] = order.data();
      for (std::size_t j = 0; j < kItems; ++j) {
        const std::int64_t line_head[kLineHead] = {number, static_cast<std::int64_t>(products[j]), quantities[j]};
        const std::span<std::byte> line(write_.data() + (1 + j) * o_.payload_bytes, o_.payload_bytes);
        std::memcpy(line.data(), line_head, sizeof line_head);
        fill_words(line, number, kLineHead);
        inserted[1 + j] = layout_.line(client_, slot, j);
        in[1 + j] = line.data();
      }
      s = client.insert_many(inserted, in);
    }
    if (s) s = client.commit();
    if (s) {
      ++orders_;
      for (std::int64_t q : quantities) units_ += static_cast<std::uint64_t>(q);
    }
    return s;
  }

 private:
  Status torn(const char* what, std::uint64_t p, Client& client) {
    (void)client.abort();
    return {Errc::protocol, client.name() + ": torn read: the words of the " + what + " record of product " +
                                std::to_string(p) + " come from different versions"};
  }

  const TxnOptions& o_;
  const Layout& layout_;
  std::size_t client_;
  std::vector<std::byte> read_;   // the products and stock records read, 2 x kItems payloads
  std::vector<std::byte> write_;  // the order and its lines inserted, 1 + kItems payloads
  std::uint64_t orders_ = 0;  // committed so far: the next order's number and slot
};

class Checkout final : public WorkloadImpl {
 public:
  Checkout(const TxnOptions& o, std::size_t clients) : o_(o) {
    layout_.products = o.records;
    layout_.slots = o.order_slots;
    layout_.clients = clients;
    orders_.resize(clients * layout_.slots);
    lines_.resize(clients * layout_.slots * kItems);
  }
  std::uint64_t records() const override { return layout_.records(); }
  void init(std::uint64_t id, std::span<std::byte> payload) const override {
    if (id < layout_.products) fill_words(payload, price(id));  // products: the price; the rest: zeros
  }
  std::unique_ptr<Driver> driver(Client&, std::size_t index) const override {
    return std::make_unique<CheckoutDriver>(o_, layout_, index);
  }

  void visit(std::uint64_t id, std::span<const std::byte> payload) override {
    if (id < layout_.products) {
      if (!uniform_words(payload) || word_at(payload, 0) != price(id)) ++bad_products_;
    } else if (id < 2 * layout_.products) {
      if (!uniform_words(payload)) ++torn_;
      sold_ += static_cast<std::uint64_t>(word_at(payload, 0));
    } else if (const std::uint64_t o = id - 2 * layout_.products; o < orders_.size()) {
      Order& order = orders_[o];
      for (std::size_t w = 0; w < kOrderHead; ++w) order.head[w] = word_at(payload, w);
      if (!filled(payload, kOrderHead, order.head[0])) ++torn_;
    } else {
      Line& line = lines_[o - orders_.size()];
      for (std::size_t w = 0; w < kLineHead; ++w) line.head[w] = word_at(payload, w);
      if (!filled(payload, kLineHead, line.head[0])) ++torn_;
    }
  }

  bool finish(std::uint64_t units, const std::vector<std::uint64_t>& commits, std::ostream& out) override {
    std::uint64_t present = 0, broken = 0, line_units = 0;
    for (std::size_t o = 0; o < orders_.size(); ++o) {
      const Order& order = orders_[o];
      for (std::size_t j = 0; j < kItems; ++j) {
        const Line& line = lines_[o * kItems + j];
        if (order.head[0] == 0) {
          if (line.head[0] != 0) ++broken;  // a line without its order
          continue;
        }
        if (line.head[0] != order.head[0] || line.head[1] != order.head[2 + j] || line.head[2] != order.head[2 + kItems + j]) {
          ++broken;
        }
        line_units += static_cast<std::uint64_t>(line.head[2]);
      }
      if (order.head[0] != 0) ++present;
    }
    bool wrapped = false;
    std::uint64_t committed = 0;
    for (std::uint64_t c : commits) {
      wrapped = wrapped || c > layout_.slots;
      committed += c;
    }
    bool ok = true;
    auto check = [&](bool held, const std::string& what) {
      out << "txn: checkout " << (held ? "check holds: " : "check VIOLATED: ") << what << '\n';
      ok = ok && held;
    };
    check(sold_ == units, "units sold (stock records) " + std::to_string(sold_) + " == units committed by the clients " +
                              std::to_string(units));
    check(broken == 0, std::to_string(present) + " orders present, " + std::to_string(broken) +
                           " order lines not matching their order");
    if (!wrapped) {
      check(line_units == sold_, "units of the order lines " + std::to_string(line_units) + " == units sold " +
                                     std::to_string(sold_));
      check(present == committed, "orders present " + std::to_string(present) + " == commits " + std::to_string(committed));
    } else {
      out << "txn: checkout: insert rings wrapped (more commits than " << layout_.slots
          << " order slots per client): lines checked against their orders only\n";
    }
    check(bad_products_ == 0, std::to_string(bad_products_) + " product records changed");
    if (torn_ != 0) {
      out << "txn: " << torn_ << " record(s) hold words of different versions\n";
      ok = false;
    }
    return ok;
  }

 private:
  // Whether the words after the head all hold the record's order number.
  static bool filled(std::span<const std::byte> payload, std::size_t head, std::int64_t number) {
    return uniform_words(payload, head) && (payload.size() / sizeof number <= head || word_at(payload, head) == number);
  }
  struct Order {
    std::int64_t head[kOrderHead] = {};
  };
  struct Line {
    std::int64_t head[kLineHead] = {};
  };
  const TxnOptions& o_;
  Layout layout_;
  std::vector<Order> orders_;
  std::vector<Line> lines_;
  std::uint64_t sold_ = 0, torn_ = 0, bad_products_ = 0;
};

}  // namespace

std::unique_ptr<WorkloadImpl> make_checkout(const TxnOptions& o, std::size_t clients) {
  auto bad = [](const std::string& what) { throw Error(Errc::invalid_argument, "checkout workload: " + what); };
  if (o.records < kItems) bad("needs at least " + std::to_string(kItems) + " products");
  if (o.order_slots == 0) bad("needs order slots (--order-slots)");
  if (o.payload_bytes < kOrderHead * sizeof(std::int64_t)) {
    bad("records of " + std::to_string(o.payload_bytes) + " bytes cannot hold an order (" +
        std::to_string(kOrderHead * sizeof(std::int64_t)) + ")");
  }
  return std::make_unique<Checkout>(o, clients);
}

}  // namespace dfi::apps::rsi::detail
