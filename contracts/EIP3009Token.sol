// SPDX-License-Identifier: MIT
pragma solidity ^0.8.20;

/**
 * @title EIP3009Token
 * @notice A small ERC-20 + EIP-3009 token for local chains (anvil) used by x402srv's tests,
 * demo and benchmarks.
 *
 * It reproduces the parts of Circle's USDC (FiatTokenV2_2) that x402 clients and facilitators
 * rely on: the EIP-712 domain (name, version, chainId, verifyingContract), the three EIP-3009
 * functions with both signature encodings (v, r, s and packed `bytes`), the typehash
 * constants, the events, and - because facilitators map them to x402 error codes - the exact
 * revert strings. Signature checking follows USDC's SignatureChecker: ECDSA (low-s, v in
 * {27, 28}, non-zero signer) for accounts without code, ERC-1271 for contract wallets.
 *
 * Deliberately left out: proxy/upgradeability, pausing, blacklisting, minter allowances and
 * EIP-2612 permit. The deployer is the only minter.
 */
contract EIP3009Token {
    // ------------------------------------------------------------------ constants

    /// keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)")
    bytes32 private constant EIP712_DOMAIN_TYPEHASH =
        keccak256("EIP712Domain(string name,string version,uint256 chainId,address verifyingContract)");

    /// Same value as USDC: 0x7c7c6cdb67a18743f49ec6fa9b35f50d52ed05cbed4cc592e13b44501c1a2267
    bytes32 public constant TRANSFER_WITH_AUTHORIZATION_TYPEHASH =
        keccak256(
            "TransferWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
        );

    /// Same value as USDC: 0xd099cc98ef71107a616c4f0f941f04c322d8e254fe26b3c6668db87aae413de8
    bytes32 public constant RECEIVE_WITH_AUTHORIZATION_TYPEHASH =
        keccak256(
            "ReceiveWithAuthorization(address from,address to,uint256 value,uint256 validAfter,uint256 validBefore,bytes32 nonce)"
        );

    /// Same value as USDC: 0x158b0a9edf7a828aad02f63cd515c68ef2f50ba807396f6d12842833a1597429
    bytes32 public constant CANCEL_AUTHORIZATION_TYPEHASH =
        keccak256("CancelAuthorization(address authorizer,bytes32 nonce)");

    /// Upper bound for `s` (secp256k1n / 2): higher values are the malleable twin of a valid
    /// signature and are rejected, as in USDC's ECRecover library.
    uint256 private constant MAX_S =
        0x7FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF5D576E7357A4501DDFE92F46681B20A0;

    /// ERC-1271 `isValidSignature(bytes32,bytes)` selector, returned by a contract wallet
    /// that accepts the signature.
    bytes4 private constant ERC1271_MAGIC_VALUE = 0x1626ba7e;

    // ---------------------------------------------------------------------- state

    /// Token name; also the EIP-712 domain name that signers must use.
    string public name;
    /// EIP-712 domain version ("2" for USDC on most chains).
    string private _version;
    uint8 public immutable decimals;
    /// The deployer: the only account allowed to mint.
    address public immutable owner;

    uint256 public totalSupply;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;

    /// authorizer => nonce => used or canceled. Nonces are random 32-byte values chosen by
    /// the signer, so authorizations need not be consumed in order.
    mapping(address => mapping(bytes32 => bool)) private _authorizationStates;

    // The domain separator is cached for the deployment chain and recomputed if the chain id
    // ever differs (a fork), so a signature for one chain can never be replayed on another.
    bytes32 private immutable _cachedDomainSeparator;
    uint256 private immutable _cachedChainId;

    // --------------------------------------------------------------------- events

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);
    event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce);
    event AuthorizationCanceled(address indexed authorizer, bytes32 indexed nonce);

    constructor(string memory name_, string memory version_, uint8 decimals_) {
        name = name_;
        _version = version_;
        decimals = decimals_;
        owner = msg.sender;
        _cachedChainId = block.chainid;
        _cachedDomainSeparator = _buildDomainSeparator(name_, version_);
    }

    // --------------------------------------------------------------------- ERC-20

    /// @notice Always "USDC": x402 tooling and humans reading logs expect the USDC symbol.
    function symbol() external pure returns (string memory) {
        return "USDC";
    }

    function transfer(address to, uint256 value) external returns (bool) {
        _transfer(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        _approve(msg.sender, spender, value);
        return true;
    }

    /// @dev Like USDC, an allowance of type(uint256).max is not "infinite": it is spent too.
    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        require(value <= allowance[from][msg.sender], "ERC20: transfer amount exceeds allowance");
        _transfer(from, to, value);
        allowance[from][msg.sender] -= value;
        return true;
    }

    /// @notice Creates `amount` new tokens for `to`. Only the deployer may mint.
    function mint(address to, uint256 amount) external returns (bool) {
        require(msg.sender == owner, "EIP3009Token: caller is not the owner");
        require(to != address(0), "FiatToken: mint to the zero address");
        totalSupply += amount;
        balanceOf[to] += amount;
        emit Transfer(address(0), to, amount);
        return true;
    }

    // -------------------------------------------------------------------- EIP-712

    /// @notice The EIP-712 domain version given at deployment.
    function version() external view returns (string memory) {
        return _version;
    }

    // solhint-disable-next-line func-name-mixedcase
    function DOMAIN_SEPARATOR() external view returns (bytes32) {
        return _domainSeparator();
    }

    /// @notice EIP-5267 description of the domain (fields 0x0f: name, version, chainId,
    /// verifyingContract; no salt, no extensions).
    function eip712Domain()
        external
        view
        returns (
            bytes1 fields,
            string memory name_,
            string memory version_,
            uint256 chainId,
            address verifyingContract,
            bytes32 salt,
            uint256[] memory extensions
        )
    {
        return (hex"0f", name, _version, block.chainid, address(this), bytes32(0), new uint256[](0));
    }

    // -------------------------------------------------------------------- EIP-3009

    /// @notice True once the authorization was used or canceled.
    function authorizationState(address authorizer, bytes32 nonce) external view returns (bool) {
        return _authorizationStates[authorizer][nonce];
    }

    /// @notice Executes a transfer signed by `from`; anyone (e.g. a facilitator) may submit it.
    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external {
        _transferWithAuthorization(
            TRANSFER_WITH_AUTHORIZATION_TYPEHASH,
            from,
            to,
            value,
            validAfter,
            validBefore,
            nonce,
            abi.encodePacked(r, s, v)
        );
    }

    /// @notice Same as above with the signature packed as r || s || v (EOA) or in any format
    /// a contract wallet accepts through ERC-1271.
    function transferWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external {
        _transferWithAuthorization(
            TRANSFER_WITH_AUTHORIZATION_TYPEHASH,
            from,
            to,
            value,
            validAfter,
            validBefore,
            nonce,
            signature
        );
    }

    /// @notice Like transferWithAuthorization, but only the payee may submit it, so a
    /// signature seen in the mempool cannot be front-run into a different contract call.
    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external {
        require(to == msg.sender, "FiatTokenV2: caller must be the payee");
        _transferWithAuthorization(
            RECEIVE_WITH_AUTHORIZATION_TYPEHASH,
            from,
            to,
            value,
            validAfter,
            validBefore,
            nonce,
            abi.encodePacked(r, s, v)
        );
    }

    function receiveWithAuthorization(
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) external {
        require(to == msg.sender, "FiatTokenV2: caller must be the payee");
        _transferWithAuthorization(
            RECEIVE_WITH_AUTHORIZATION_TYPEHASH,
            from,
            to,
            value,
            validAfter,
            validBefore,
            nonce,
            signature
        );
    }

    /// @notice Burns an unused nonce so the authorization signed with it can never execute.
    function cancelAuthorization(address authorizer, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)
        external
    {
        _cancelAuthorization(authorizer, nonce, abi.encodePacked(r, s, v));
    }

    function cancelAuthorization(address authorizer, bytes32 nonce, bytes memory signature)
        external
    {
        _cancelAuthorization(authorizer, nonce, signature);
    }

    // ------------------------------------------------------------------- internals

    function _transfer(address from, address to, uint256 value) private {
        require(from != address(0), "ERC20: transfer from the zero address");
        require(to != address(0), "ERC20: transfer to the zero address");
        require(value <= balanceOf[from], "ERC20: transfer amount exceeds balance");
        balanceOf[from] -= value;
        balanceOf[to] += value;
        emit Transfer(from, to, value);
    }

    function _approve(address holder, address spender, uint256 value) private {
        require(holder != address(0), "ERC20: approve from the zero address");
        require(spender != address(0), "ERC20: approve to the zero address");
        allowance[holder][spender] = value;
        emit Approval(holder, spender, value);
    }

    /// @dev Shared by transfer- and receiveWithAuthorization; they differ only in typehash.
    /// The checks run in USDC's order (time window, nonce, signature) so the same bad
    /// authorization yields the same revert string on both tokens.
    function _transferWithAuthorization(
        bytes32 typehash,
        address from,
        address to,
        uint256 value,
        uint256 validAfter,
        uint256 validBefore,
        bytes32 nonce,
        bytes memory signature
    ) private {
        require(block.timestamp > validAfter, "FiatTokenV2: authorization is not yet valid");
        require(block.timestamp < validBefore, "FiatTokenV2: authorization is expired");
        _requireUnusedAuthorization(from, nonce);
        bytes32 structHash =
            keccak256(abi.encode(typehash, from, to, value, validAfter, validBefore, nonce));
        _requireValidSignature(from, structHash, signature);

        _authorizationStates[from][nonce] = true;
        emit AuthorizationUsed(from, nonce);
        _transfer(from, to, value);
    }

    function _cancelAuthorization(address authorizer, bytes32 nonce, bytes memory signature)
        private
    {
        _requireUnusedAuthorization(authorizer, nonce);
        _requireValidSignature(
            authorizer, keccak256(abi.encode(CANCEL_AUTHORIZATION_TYPEHASH, authorizer, nonce)), signature
        );
        _authorizationStates[authorizer][nonce] = true;
        emit AuthorizationCanceled(authorizer, nonce);
    }

    function _requireUnusedAuthorization(address authorizer, bytes32 nonce) private view {
        require(
            !_authorizationStates[authorizer][nonce], "FiatTokenV2: authorization is used or canceled"
        );
    }

    function _requireValidSignature(address signer, bytes32 structHash, bytes memory signature)
        private
        view
    {
        bytes32 digest = keccak256(abi.encodePacked("\x19\x01", _domainSeparator(), structHash));
        require(_isValidSignatureNow(signer, digest, signature), "FiatTokenV2: invalid signature");
    }

    /// @dev USDC's SignatureChecker: an account without code must have produced an ECDSA
    /// signature; a contract wallet is asked through ERC-1271.
    function _isValidSignatureNow(address signer, bytes32 digest, bytes memory signature)
        private
        view
        returns (bool)
    {
        if (signer.code.length == 0) {
            return _recover(digest, signature) == signer;
        }
        (bool success, bytes memory result) =
            signer.staticcall(abi.encodeWithSelector(ERC1271_MAGIC_VALUE, digest, signature));
        return success && result.length >= 32 && abi.decode(result, (bytes32)) == bytes32(ERC1271_MAGIC_VALUE);
    }

    /// @dev USDC's ECRecover.recover, including its revert strings: malformed signatures
    /// revert with a reason instead of silently failing the comparison.
    function _recover(bytes32 digest, bytes memory signature) private pure returns (address) {
        require(signature.length == 65, "ECRecover: invalid signature length");
        bytes32 r;
        bytes32 s;
        uint8 v;
        assembly ("memory-safe") {
            r := mload(add(signature, 0x20))
            s := mload(add(signature, 0x40))
            v := byte(0, mload(add(signature, 0x60)))
        }
        if (uint256(s) > MAX_S) {
            revert("ECRecover: invalid signature 's' value");
        }
        if (v != 27 && v != 28) {
            revert("ECRecover: invalid signature 'v' value");
        }
        address recovered = ecrecover(digest, v, r, s);
        require(recovered != address(0), "ECRecover: invalid signature");
        return recovered;
    }

    function _domainSeparator() private view returns (bytes32) {
        if (block.chainid == _cachedChainId) {
            return _cachedDomainSeparator;
        }
        return _buildDomainSeparator(name, _version);
    }

    function _buildDomainSeparator(string memory name_, string memory version_)
        private
        view
        returns (bytes32)
    {
        return keccak256(
            abi.encode(
                EIP712_DOMAIN_TYPEHASH,
                keccak256(bytes(name_)),
                keccak256(bytes(version_)),
                block.chainid,
                address(this)
            )
        );
    }
}
