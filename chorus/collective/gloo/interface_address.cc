// interface_address (gloo.h): the numeric address of a network interface, as GLOO_SOCKET_IFNAME
// names it. Needs no Gloo: built in every configuration.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include <chorus/collective/gloo/gloo.h>
#include <chorus/core/error.h>

namespace chorus::collective {

using internal::str_cat;

std::string interface_address(const std::string& name) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0)
    throw UnavailableError(
        str_cat("GLOO_SOCKET_IFNAME='", name, "': cannot list this host's interfaces: ", std::strerror(errno)));
  std::unique_ptr<ifaddrs, void (*)(ifaddrs*)> guard(list, ::freeifaddrs);
  std::string v4, v6, names;
  for (const ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || (a->ifa_addr->sa_family != AF_INET && a->ifa_addr->sa_family != AF_INET6)) continue;
    const std::string ifname = a->ifa_name;
    if (names.find("'" + ifname + "'") == std::string::npos)
      names += str_cat(names.empty() ? "" : ", ", "'", ifname, "'");
    if (ifname != name) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (a->ifa_addr->sa_family == AF_INET && v4.empty()) {
      ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof text);
      v4 = text;
    } else if (a->ifa_addr->sa_family == AF_INET6 && v6.empty()) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr, text, sizeof text);
      v6 = text;
    }
  }
  if (!v4.empty()) return v4;
  if (!v6.empty()) return v6;
  throw InvalidArgumentError(str_cat("GLOO_SOCKET_IFNAME='", name,
                                     "': this host has no interface of that name with an address; its interfaces "
                                     "with addresses are ",
                                     names.empty() ? std::string("none") : names));
}

}  // namespace chorus::collective
