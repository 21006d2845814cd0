-- The demo schema, seeded once on the first start of the mysql container (it runs in the
-- database MYSQL_DATABASE, `shop`). loadgen.py keeps changing these rows afterwards.
CREATE TABLE customers (
  id INT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  email VARCHAR(190) NOT NULL,
  name VARCHAR(100) NOT NULL,
  tier ENUM('basic', 'silver', 'gold') NOT NULL DEFAULT 'basic',
  updated_at TIMESTAMP(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3) ON UPDATE CURRENT_TIMESTAMP(3),
  UNIQUE KEY customers_email (email)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

CREATE TABLE orders (
  id BIGINT UNSIGNED NOT NULL AUTO_INCREMENT PRIMARY KEY,
  customer_id INT UNSIGNED NOT NULL,
  status ENUM('new', 'paid', 'shipped', 'cancelled') NOT NULL DEFAULT 'new',
  total DECIMAL(10, 2) NOT NULL,
  note JSON NULL,
  created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
  KEY orders_customer (customer_id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4;

INSERT INTO customers (email, name, tier) VALUES
  ('ada@example.com', 'Ada', 'gold'),
  ('brian@example.com', 'Brian', 'basic'),
  ('chen@example.com', 'Chen', 'silver'),
  ('dora@example.com', 'Dora', 'basic');

INSERT INTO orders (customer_id, status, total, note) VALUES
  (1, 'paid', 120.50, '{"gift": true}'),
  (2, 'new', 15.00, NULL),
  (3, 'shipped', 42.99, '{"carrier": "post"}');
