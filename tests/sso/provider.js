// A real OpenID Connect provider for the single sign-on tests: panva's oidc-provider (certified),
// with its development login and consent pages (any login name, any password).
//
//   PORT=<port> REDIRECT_URI=<ax's callback> CLIENT_SECRET=<secret> [ISSUER_HOST=localhost] node provider.js
//
// It listens on 127.0.0.1; ISSUER_HOST names it in its issuer URL (`localhost` makes it another
// site than a gateway at 127.0.0.1, as a real provider is: cookies and SameSite then work as in
// production).
//
// One confidential client, `ax`, with PKCE required. Each account's `groups` claim comes from
// GROUPS (a JSON object: login → groups; unknown logins have none), released with the `groups`
// scope. Prints "issuer <url>" once it listens; stops on SIGTERM or when stdin closes.
import http from 'node:http';

import Provider from 'oidc-provider';

const port = Number(process.env.PORT);
const issuer = `http://${process.env.ISSUER_HOST || '127.0.0.1'}:${port}`;
const groups = JSON.parse(process.env.GROUPS || '{}');

const provider = new Provider(issuer, {
  clients: [{
    client_id: 'ax',
    client_secret: process.env.CLIENT_SECRET,
    redirect_uris: [process.env.REDIRECT_URI],
    grant_types: ['authorization_code'],
    response_types: ['code'],
    token_endpoint_auth_method: 'client_secret_basic',
  }],
  pkce: { required: () => true },
  scopes: ['openid', 'profile', 'email', 'groups'],
  claims: {
    openid: ['sub'],
    profile: ['name', 'preferred_username'],
    email: ['email', 'email_verified'],
    groups: ['groups'],
  },
  async findAccount(ctx, id) {
    return {
      accountId: id,
      async claims() {
        return {
          sub: id,
          name: id,
          preferred_username: id,
          email: `${id}@example.test`,
          email_verified: true,
          groups: groups[id] || [],
        };
      },
    };
  },
  cookies: { keys: ['ax-sso-test-cookie-key'] },
  features: { devInteractions: { enabled: true } },
});
provider.on('server_error', (ctx, err) => console.error('server_error', err));

const server = http.createServer(provider.callback());
server.listen(port, '127.0.0.1', () => console.log(`issuer ${issuer}`));
const stop = () => server.close(() => process.exit(0));
process.on('SIGTERM', stop);
process.stdin.on('end', stop);
process.stdin.resume();
